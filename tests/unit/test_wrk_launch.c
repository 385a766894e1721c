/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for starting tasks (worker/spawn.c, worker/env.c, worker/launch.c): capturing a
 * program's output, the shim's vforked starts, the task environment builder (pure, no fork) fed a
 * BIND message as the agent feeds it, and the launcher for real: a task's log file and exit code,
 * KILL of a whole process group, exec failures turned into messages, and the state directories.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- spawn ---- */

static void test_spawn_capture(void **state)
{
    char *argv[] = { (char *)"/bin/sh", (char *)"-c",
                     (char *)"echo out; echo err >&2; read x; echo \"[$x]\"; exit 4", NULL };
    char *out = NULL;
    char *errout = NULL;
    int status = 0;
    struct mu_err err;
    (void)state;

    assert_int_equal(wrk_spawn_capture(argv, 1024, 10000, &out, &errout, &status, &err), 0);
    assert_string_equal(out, "out\n[]\n"); /* stdin is /dev/null */
    assert_string_equal(errout, "err\n");
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 4);
    free(out);
    free(errout);

    char *big[] = { (char *)"/bin/sh", (char *)"-c", (char *)"yes | head -c 100000", NULL };
    assert_int_equal(wrk_spawn_capture(big, 1000, 10000, &out, &errout, &status, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);

    char *slow[] = { (char *)"/bin/sh", (char *)"-c", (char *)"exec sleep 30", NULL };
    assert_int_equal(wrk_spawn_capture(slow, 1000, 200, &out, &errout, &status, &err), -1);
    assert_non_null(strstr(err.msg, "did not finish within 200 ms"));
}

/* Starts s, waits for a clean exit, and checks the first line of the file <dir>/<name>.out. */
static void spawn_expect_out(const struct wrk_spawn *s, const char *dir, const char *want)
{
    char path[1024];
    char line[64];
    enum wrk_fault fault;
    struct mu_err err;
    int status = 0;
    pid_t pid = -1;
    FILE *f;

    assert_int_equal(wrk_spawn_start(s, &pid, &fault, &err), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/%s.out", dir, s->argv[0]), 0);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    (void)fclose(f);
    assert_string_equal(line, want);
}

/* The shim's starts: vforked, the command looked up in the PATH of the task's environment. */
static void test_spawn_single_threaded(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    char path_var[1100];
    char *envp[] = { path_var, (char *)"MARK=from-the-task-env", NULL };
    char *tool[] = { (char *)"muster-test-tool", NULL };
    char *plain[] = { (char *)"muster-test-plain", NULL };
    char *missing[] = { (char *)"nosuch-muster-tool", NULL };
    const char *path_before = getenv("PATH");
    enum wrk_fault fault;
    struct wrk_spawn s;
    struct mu_err err;
    pid_t pid = -1;
    (void)state;

    assert_int_equal(mu_snprintf(path_var, sizeof(path_var), "PATH=%s:/usr/bin:/bin", dir), 0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/muster-test-tool", dir), 0);
    write_file(path, "#!/bin/sh\necho \"$MARK\" > \"$0.out\"\n", 0755);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/muster-test-plain", dir), 0);
    write_file(path, "echo \"plain $MARK\" > \"$0.out\"\n", 0755); /* no #!: run by sh */
    memset(&s, 0, sizeof(s));
    s.envp = envp;
    s.fd_stdin = s.fd_stdout = s.fd_stderr = -1;
    s.single_threaded = true;

    s.argv = tool;
    spawn_expect_out(&s, dir, "from-the-task-env\n");
    assert_ptr_equal(getenv("PATH"), path_before); /* the caller's environment is back */
    s.argv = plain;
    spawn_expect_out(&s, dir, "plain from-the-task-env\n");

    s.argv = missing;
    assert_int_equal(wrk_spawn_start(&s, &pid, &fault, &err), -1);
    assert_string_equal(err.msg, "cannot run 'nosuch-muster-tool': No such file or directory");
    assert_int_equal(fault, WRK_FAULT_JOB);
    assert_ptr_equal(getenv("PATH"), path_before);
    rm_rf(dir);
    free(dir);
}

/* ---- environment ---- */

/*
 * A launch of task 1, attempt 2 of job 1732270000123-0 on gpu-node-7 (GPUs "0,1"), as the agent
 * makes one: l refers to the BIND b (no command yet; proto_msg_release(b) when done).
 */
static void fill_launch(struct wrk_launch *l, struct proto_msg *b, const char *state_dir)
{
    proto_msg_init(b, PROTO_BIND);
    mu_strlcpy(b->task.job, "1732270000123-0", sizeof(b->task.job));
    b->task.task = 1;
    b->task.attempt = 2;
    b->world_size = 4;
    b->local_rank = 1;
    b->local_world_size = 2;
    b->node_rank = 0;
    mu_strlcpy(b->master_addr, "10.0.0.5", sizeof(b->master_addr));
    b->master_port = 29500;
    memset(l, 0, sizeof(*l));
    l->bind = b;
    l->state_dir = state_dir;
    l->node = "gpu-node-7";
    l->cuda_visible = "0,1";
}

static void test_env_build(void **state)
{
    char *base[] = { (char *)"PATH=/usr/bin:/bin",
                     (char *)"FOO=base",
                     (char *)"MUSTER_RESUME_FROM=old",
                     (char *)"RANK=99",
                     (char *)"NOEQUALS",
                     NULL };
    const char *spec[] = { "FOO=spec", "RANK=5", "EMPTY=", "A=b=c" };
    struct wrk_launch l;
    struct proto_msg b;
    struct mu_err err;
    char **envp;
    char **spec_env;
    (void)state;

    fill_launch(&l, &b, "/var/lib/muster/worker/n1");
    assert_int_equal(proto_msg_set_env(&b, 4, spec, &err), 0);
    envp = wrk_env_build(&l, base, &err);
    assert_non_null(envp);
    assert_string_equal(wrk_env_get(envp, "PATH"), "/usr/bin:/bin");
    assert_string_equal(wrk_env_get(envp, "FOO"), "spec");
    assert_string_equal(wrk_env_get(envp, "EMPTY"), "");
    assert_string_equal(wrk_env_get(envp, "A"), "b=c");
    assert_null(wrk_env_get(envp, "NOEQUALS"));
    assert_string_equal(wrk_env_get(envp, "MUSTER_JOB_ID"), "1732270000123-0");
    assert_string_equal(wrk_env_get(envp, "MUSTER_TASK_INDEX"), "1");
    assert_string_equal(wrk_env_get(envp, "MUSTER_ATTEMPT"), "2");
    assert_string_equal(wrk_env_get(envp, "MUSTER_NODE"), "gpu-node-7");
    assert_string_equal(wrk_env_get(envp, "MUSTER_CHECKPOINT_FILE"),
                        "/var/lib/muster/worker/n1/ckpt/1732270000123-0.2.1");
    assert_null(wrk_env_get(envp, "MUSTER_RESUME_FROM"));
    assert_string_equal(wrk_env_get(envp, "CUDA_VISIBLE_DEVICES"), "0,1");
    assert_null(wrk_env_get(envp, "CUDA_DEVICE_ORDER"));
    assert_string_equal(wrk_env_get(envp, "RANK"), "1");
    assert_string_equal(wrk_env_get(envp, "WORLD_SIZE"), "4");
    assert_string_equal(wrk_env_get(envp, "LOCAL_RANK"), "1");
    assert_string_equal(wrk_env_get(envp, "LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(wrk_env_get(envp, "GROUP_RANK"), "0");
    assert_string_equal(wrk_env_get(envp, "NODE_RANK"), "0");
    assert_string_equal(wrk_env_get(envp, "MASTER_ADDR"), "10.0.0.5");
    assert_string_equal(wrk_env_get(envp, "MASTER_PORT"), "29500");
    /* Each key once. */
    for (size_t i = 0; envp[i]; i++) {
        size_t klen = strcspn(envp[i], "=");
        for (size_t j = i + 1; envp[j]; j++)
            assert_false(strncmp(envp[i], envp[j], klen) == 0 && envp[j][klen] == '=');
    }
    wrk_env_free(envp);

    /* Discovered GPUs and a resumed attempt. */
    l.cuda_visible = "GPU-aaa,GPU-bbb";
    l.cuda_pci_order = true;
    mu_strlcpy(b.resume_from, "s3://bucket/ckpt/step-400", sizeof(b.resume_from));
    envp = wrk_env_build(&l, NULL, &err);
    assert_non_null(envp);
    assert_string_equal(wrk_env_get(envp, "CUDA_VISIBLE_DEVICES"), "GPU-aaa,GPU-bbb");
    assert_string_equal(wrk_env_get(envp, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    assert_string_equal(wrk_env_get(envp, "MUSTER_RESUME_FROM"), "s3://bucket/ckpt/step-400");
    assert_null(wrk_env_get(envp, "PATH"));
    wrk_env_free(envp);

    /* Bad spec entries (which the decoder refuses too: set by hand, borrowed for the call). */
    char *bad1[] = { (char *)"NOVALUE" };
    char *bad2[] = { (char *)"=x" };
    spec_env = b.env;
    b.nenv = 1;
    b.env = bad1;
    assert_null(wrk_env_build(&l, base, &err));
    assert_string_equal(err.msg, "env entry 'NOVALUE': expected KEY=VALUE");
    b.env = bad2;
    assert_null(wrk_env_build(&l, base, &err));
    assert_int_equal(err.code, MU_E_INVAL);
    b.env = spec_env;
    b.nenv = 4;
    proto_msg_release(&b);
    wrk_env_free(NULL);
}

/* ---- launcher ---- */

static void test_launch_exit_code(void **state)
{
    char *dir = make_tmpdir();
    const char *argv[] = { "/bin/sh", "-c",
                           "echo $RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES; pwd; "
                           "echo oops >&2; [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] "
                           "|| echo not-leader; exit 3" };
    struct wrk_launch l;
    struct proto_msg b;
    struct mu_err err;
    char path[1024];
    char *text;
    pid_t pid = -1;
    int status = 0;
    (void)state;

    fill_launch(&l, &b, dir);
    assert_int_equal(proto_msg_set_argv(&b, 3, argv, &err), 0);
    if (wrk_launch_start(&l, NULL, &pid, &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(pid > 0);
    assert_int_equal(wait_exit(pid, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);

    assert_int_equal(wrk_task_path(dir, "logs", b.task.job, b.task.attempt, b.task.task, ".out",
                                   path, sizeof(path), &err),
                     0);
    assert_non_null(strstr(path, "/logs/1732270000123-0.2.1.out"));
    text = mu_file_read(path, 4096, NULL, &err);
    assert_non_null(text);
    char want[1200];
    assert_int_equal(mu_snprintf(want, sizeof(want), "1 4 0,1\n%s\n", dir), 0);
    assert_string_equal(text, want);
    free(text);
    assert_int_equal(wrk_task_path(dir, "logs", b.task.job, b.task.attempt, b.task.task, ".err",
                                   path, sizeof(path), &err),
                     0);
    text = mu_file_read(path, 4096, NULL, &err);
    assert_non_null(text);
    assert_string_equal(text, "oops\n");
    free(text);

    /* A second run of the same attempt appends to the same log. */
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), 0);
    assert_int_equal(wait_exit(pid, &status), 0);
    text = mu_file_read(path, 4096, NULL, &err);
    assert_non_null(text);
    assert_string_equal(text, "oops\noops\n");
    free(text);

    /* The checkpoint directory exists for the task to write into. */
    struct stat st;
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/ckpt", dir), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    proto_msg_release(&b);
    rm_rf(dir);
    free(dir);
}

static void test_launch_kill_group(void **state)
{
    char *dir = make_tmpdir();
    const char *argv[] = { "/bin/sh", "-c", "sleep 100 & echo $!; wait" };
    struct wrk_launch l;
    struct proto_msg b;
    struct mu_err err;
    char path[1024];
    pid_t pid = -1;
    int64_t child = 0;
    int status = 0;
    (void)state;

    /* Become the subreaper so that the orphaned sleep is ours to wait for. */
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    fill_launch(&l, &b, dir);
    assert_int_equal(proto_msg_set_argv(&b, 3, argv, &err), 0);
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), 0);
    assert_int_equal(getpgid(pid), pid);
    assert_int_equal(wrk_task_path(dir, "logs", b.task.job, b.task.attempt, b.task.task, ".out",
                                   path, sizeof(path), &err),
                     0);
    for (int i = 0; i < 500 && child == 0; i++) {
        char *text = mu_file_read(path, 4096, NULL, NULL);
        if (text && strchr(text, '\n')) {
            *strchr(text, '\n') = '\0';
            assert_int_equal(mu_parse_i64(text, 2, INT32_MAX, &child, &err), 0);
        }
        free(text);
        if (child == 0)
            sleep_ms(10);
    }
    assert_true(child > 0);
    assert_int_equal(getpgid((pid_t)child), pid);

    assert_int_equal(kill(-pid, SIGTERM), 0); /* the whole group */
    assert_int_equal(wait_exit(pid, &status), 0);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);
    assert_int_equal(wait_exit((pid_t)child, &status), 0);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);
    assert_int_equal(kill((pid_t)child, 0), -1);
    assert_int_equal(errno, ESRCH);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0), 0);
    proto_msg_release(&b);
    rm_rf(dir);
    free(dir);
}

static void test_launch_failures(void **state)
{
    char *dir = make_tmpdir();
    const char *missing[] = { "nosuchcmd-muster-test" };
    const char *abs_missing[] = { "/nonexistent/bin/tool" };
    const char *ok[] = { "/bin/true" };
    char notexec_path[1024];
    const char *notexec[] = { notexec_path };
    struct wrk_launch l;
    struct proto_msg b;
    struct mu_err err;
    pid_t pid = -1;
    (void)state;

    fill_launch(&l, &b, dir);
    assert_int_equal(proto_msg_set_argv(&b, 1, missing, &err), 0);
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_NOTFOUND);
    assert_string_equal(err.msg, "cannot run 'nosuchcmd-muster-test': No such file or directory");
    assert_int_equal(proto_msg_set_argv(&b, 1, abs_missing, &err), 0);
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "cannot run '/nonexistent/bin/tool': No such file or directory");
    assert_int_equal(mu_snprintf(notexec_path, sizeof(notexec_path), "%s/notexec", dir), 0);
    write_file(notexec_path, "echo hi\n", 0644);
    assert_int_equal(proto_msg_set_argv(&b, 1, notexec, &err), 0);
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_SYS);
    assert_non_null(strstr(err.msg, "/notexec': Permission denied"));

    assert_int_equal(proto_msg_set_argv(&b, 1, ok, &err), 0);
    mu_strlcpy(b.workdir, "/nonexistent/muster/x", sizeof(b.workdir));
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "workdir '/nonexistent/muster/x': No such file or directory");

    b.workdir[0] = '\0';
    mu_strlcpy(b.task.job, "../etc", sizeof(b.task.job));
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    mu_strlcpy(b.task.job, "1-0", sizeof(b.task.job));
    assert_int_equal(proto_msg_set_argv(&b, 0, NULL, &err), 0);
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "empty command");
    proto_msg_release(&b);
    rm_rf(dir);
    free(dir);
}

static void test_mkdir_p(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    struct mu_err err;
    (void)state;
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/a/b//c/", dir), 0);
    assert_int_equal(wrk_mkdir_p(path, &err), 0);
    assert_int_equal(wrk_mkdir_p(path, &err), 0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/file", dir), 0);
    write_file(path, "x", 0644);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/file/sub", dir), 0);
    assert_int_equal(wrk_mkdir_p(path, &err), -1);
    assert_non_null(strstr(err.msg, "cannot create directory"));
    rm_rf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spawn_capture),     cmocka_unit_test(test_spawn_single_threaded),
        cmocka_unit_test(test_env_build),         cmocka_unit_test(test_launch_exit_code),
        cmocka_unit_test(test_launch_kill_group), cmocka_unit_test(test_launch_failures),
        cmocka_unit_test(test_mkdir_p),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

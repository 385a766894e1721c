/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the files a task or its shim writes and the worker reads back (worker/ckpt.c,
 * worker/taskrec.c): the checkpoint file parser and reader (a FIFO, a symlink), task records and
 * exit files (round trips, bad-input tables, hostile files, removal), the shim's spec and its
 * /proc check.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- checkpoint files ---- */

struct ckpt_case {
    const char *data;
    size_t len;       /* 0 = strlen(data) */
    int code;         /* 0 = parses */
    const char *want; /* the path, or a piece of the message */
};

static const struct ckpt_case ckpt_cases[] = {
    { "/ckpt/step-100\n", 0, 0, "/ckpt/step-100" },
    { "/ckpt/step-100", 0, 0, "/ckpt/step-100" },
    { "  s3://bucket/run 1/step-7 \r\nignored second line\n", 0, 0, "s3://bucket/run 1/step-7" },
    { "/ckpt/caf\xc3\xa9\n", 0, 0, "/ckpt/caf\xc3\xa9" },
    { "", 0, MU_E_PARSE, "empty first line" },
    { "\n/ckpt/x\n", 0, MU_E_PARSE, "empty first line" },
    { "   \t\r\n", 0, MU_E_PARSE, "empty first line" },
    { "/ckpt\0/x\n", 9, MU_E_PARSE, "NUL byte" },
    { "/ckpt/x\n\0\0\0", 11, MU_E_PARSE, "NUL byte" },
    { "/ckpt/\x1b[31mred\n", 0, MU_E_PARSE, "control byte 0x1b" },
    { "/ckpt/\x7f\n", 0, MU_E_PARSE, "control byte 0x7f" },
};

static void test_ckpt_parse(void **state)
{
    char path[PROTO_PATH_MAX];
    struct mu_err err;
    char *big;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(ckpt_cases); i++) {
        const struct ckpt_case *c = &ckpt_cases[i];
        size_t len = c->len ? c->len : strlen(c->data);
        int r;
        mu_err_clear(&err);
        r = wrk_ckpt_parse(c->data, len, path, sizeof(path), &err);
        if (c->code == 0) {
            if (r != 0)
                fail_msg("case %zu: %s", i, err.msg);
            assert_string_equal(path, c->want);
        } else {
            if (r != -1 || err.code != c->code || !strstr(err.msg, c->want))
                fail_msg("case %zu: r=%d code=%d msg='%s', want '%s'", i, r, err.code, err.msg,
                         c->want);
        }
    }
    /* Huge file, and a path longer than the buffer. */
    big = malloc(WRK_CKPT_MAX_BYTES + 2);
    assert_non_null(big);
    memset(big, 'a', WRK_CKPT_MAX_BYTES + 1);
    big[WRK_CKPT_MAX_BYTES + 1] = '\0';
    assert_int_equal(wrk_ckpt_parse(big, WRK_CKPT_MAX_BYTES + 1, path, sizeof(path), &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(wrk_ckpt_parse(big, PROTO_PATH_MAX, path, sizeof(path), &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(wrk_ckpt_parse(big, PROTO_PATH_MAX - 1, path, sizeof(path), &err), 0);
    free(big);
}

static void test_ckpt_read(void **state)
{
    char *dir = make_tmpdir();
    char file[1024];
    char path[PROTO_PATH_MAX];
    uint64_t mtime = 0;
    uint64_t before = mu_time_wall_ms();
    struct mu_err err;
    (void)state;

    assert_int_equal(mu_snprintf(file, sizeof(file), "%s/ck", dir), 0);
    /* No file yet: nothing, not an error. */
    assert_int_equal(wrk_ckpt_read(file, path, sizeof(path), &mtime, &err), 0);
    write_file(file, "/ckpt/a\n", 0644);
    assert_int_equal(wrk_ckpt_read(file, path, sizeof(path), &mtime, &err), 1);
    assert_string_equal(path, "/ckpt/a");
    assert_true(mtime + 1000 >= before && mtime <= mu_time_wall_ms() + 1000);
    /* A FIFO must not block the worker; a symlink is not followed. */
    assert_int_equal(unlink(file), 0);
    assert_int_equal(mkfifo(file, 0644), 0);
    assert_int_equal(wrk_ckpt_read(file, path, sizeof(path), &mtime, &err), -1);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(unlink(file), 0);
    assert_int_equal(symlink("/etc/hostname", file), 0);
    assert_int_equal(wrk_ckpt_read(file, path, sizeof(path), &mtime, &err), -1);
    rm_rf(dir);
    free(dir);
}

/* ---- task records, exit files, the shim's spec ---- */

static void test_taskrec_roundtrip(void **state)
{
    struct wrk_taskrec r;
    struct wrk_taskrec back;
    struct mu_err err;
    char path[256];
    char *text;
    (void)state;

    memset(&r, 0, sizeof(r));
    mu_strlcpy(r.ref.job, "1732270000123-0", sizeof(r.ref.job));
    r.ref.task = 3;
    r.ref.attempt = 2;
    r.ref.pid = 4242;
    r.shim_pid = 4241;
    r.shim_start = 123456789012ULL;
    r.started_ms = UINT64_C(1732270000999);
    r.ckpt_signal = SIGUSR1;
    r.grace_s = 90;
    r.uid = 1000;
    r.ngpus = 2;
    r.gpus[0] = 6;
    r.gpus[1] = 7;
    text = wrk_taskrec_format(&r, &err);
    assert_non_null(text);
    assert_int_equal(wrk_taskrec_parse(text, strlen(text), &back, &err), 0);
    free(text);
    assert_string_equal(back.ref.job, "1732270000123-0");
    assert_int_equal(back.ref.task, 3);
    assert_int_equal(back.ref.attempt, 2);
    assert_int_equal(back.ref.state, PROTO_TASK_RUNNING);
    assert_int_equal(back.ref.pid, 4242);
    assert_int_equal(back.shim_pid, 4241);
    assert_true(back.shim_start == 123456789012ULL);
    assert_true(back.started_ms == UINT64_C(1732270000999));
    assert_int_equal(back.ckpt_signal, SIGUSR1);
    assert_int_equal(back.grace_s, 90);
    assert_int_equal(back.uid, 1000);
    assert_int_equal(back.ngpus, 2);
    assert_int_equal(back.gpus[1], 7);

    /* Optional keys default; unknown keys are ignored (a newer shim may add some). */
    {
        static const char min[] =
            "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9,\"new\":[1]}";
        assert_int_equal(wrk_taskrec_parse(min, strlen(min), &back, &err), 0);
        assert_int_equal(back.uid, -1);
        assert_int_equal(back.ckpt_signal, 0);
        assert_int_equal(back.ngpus, 0);
    }
    assert_int_equal(wrk_task_path("/s", "tasks", "1-0", 2, 3, ".exit", path, sizeof(path), &err),
                     0);
    assert_string_equal(path, "/s/tasks/1-0.2.3.exit");
    assert_int_equal(wrk_task_path("/s", "tasks", "1-0", 2, 3, ".exit", path, 10, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

static void test_taskrec_bad(void **state)
{
    static const struct {
        const char *text;
        const char *want; /* substring of the error */
    } bad[] = {
        { "", "not a JSON object" },
        { "[1]", "not a JSON object" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10", "not a JSON object" },
        { "{\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9}", "\"job\": expected a job id" },
        { "{\"job\":\"../x\",\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9}", "\"job\"" },
        { "{\"job\":\"1-0\",\"attempt\":1,\"pid\":10,\"shim_pid\":9}", "missing \"task\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":0,\"pid\":10,\"shim_pid\":9}", "\"attempt\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":1,\"shim_pid\":9}", "\"pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":-5,\"shim_pid\":9}", "\"pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10.5,\"shim_pid\":9}", "\"pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":\"10\",\"shim_pid\":9}", "\"pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":1e30,\"shim_pid\":9}", "\"pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10}", "missing \"shim_pid\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9,\"ckpt_signal\":"
          "300}",
          "\"ckpt_signal\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9,\"gpus\":{}}",
          "\"gpus\"" },
        { "{\"job\":\"1-0\",\"task\":0,\"attempt\":1,\"pid\":10,\"shim_pid\":9,\"gpus\":[-1]}",
          "\"gpus\"[0]" },
    };
    struct wrk_taskrec r;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        mu_err_clear(&err);
        if (wrk_taskrec_parse(bad[i].text, strlen(bad[i].text), &r, &err) != -1)
            fail_msg("case %zu: '%s' parsed", i, bad[i].text);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: error '%s' lacks '%s'", i, err.msg, bad[i].want);
    }
    /* A NUL inside, and more than the cap. */
    assert_int_equal(wrk_taskrec_parse("{\"job\"\0}", 9, &r, &err), -1);
    assert_non_null(strstr(err.msg, "NUL"));
    {
        char *big = calloc(1, WRK_REC_MAX_BYTES + 2);
        assert_non_null(big);
        memset(big, ' ', WRK_REC_MAX_BYTES + 1);
        assert_int_equal(wrk_taskrec_parse(big, WRK_REC_MAX_BYTES + 1, &r, &err), -1);
        assert_int_equal(err.code, MU_E_TOOBIG);
        free(big);
    }
}

static void test_taskexit(void **state)
{
    static const char *const bad[] = {
        "",
        "{}",
        "{\"exit_code\":1}",
        "{\"exit_code\":\"1\",\"signal\":0}",
        "{\"exit_code\":1,\"signal\":256}",
        "{\"exit_code\":1.5,\"signal\":0}",
        "{\"exit_code\":1,\"signal\":0,\"ended_ms\":-1}",
        "null",
    };
    struct wrk_taskexit x;
    struct wrk_taskexit back;
    struct mu_err err;
    char buf[128];
    int status;
    pid_t pid;
    (void)state;

    memset(&x, 0, sizeof(x));
    x.exit_code = -7; /* any int survives */
    x.signal = 0;
    x.ended_ms = UINT64_C(1732270000123);
    assert_int_equal(wrk_taskexit_format(&x, buf, sizeof(buf), &err), 0);
    assert_int_equal(wrk_taskexit_parse(buf, strlen(buf), &back, &err), 0);
    assert_int_equal(back.exit_code, -7);
    assert_int_equal(back.signal, 0);
    assert_true(back.ended_ms == x.ended_ms);
    assert_int_equal(wrk_taskexit_format(&x, buf, 8, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        if (wrk_taskexit_parse(bad[i], strlen(bad[i]), &back, &err) != -1)
            fail_msg("'%s' parsed", bad[i]);
    }

    /* Statuses of real children. */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(3);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    wrk_taskexit_from_status(status, &x);
    assert_int_equal(x.exit_code, 3);
    assert_int_equal(x.signal, 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)raise(SIGKILL);
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    wrk_taskexit_from_status(status, &x);
    assert_int_equal(x.signal, SIGKILL);
    assert_int_equal(x.exit_code, 0);
    wrk_taskexit_from_siginfo(CLD_EXITED, 42, &x);
    assert_int_equal(x.exit_code, 42);
    assert_int_equal(x.signal, 0);
    wrk_taskexit_from_siginfo(CLD_DUMPED, SIGSEGV, &x);
    assert_int_equal(x.signal, SIGSEGV);
    wrk_taskexit_from_siginfo(CLD_KILLED, SIGTERM, &x);
    assert_int_equal(x.signal, SIGTERM);
}

static void test_taskrec_files(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    char tmp[1100];
    struct wrk_taskexit x;
    struct wrk_taskrec r;
    struct mu_err err;
    struct stat st;
    (void)state;

    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/a.exit", dir), 0);
    assert_int_equal(wrk_taskexit_read(path, &x, &err), 0); /* absent */
    {
        static const char exit5[] = "{\"exit_code\":5,\"signal\":0}";
        assert_int_equal(wrk_file_write_atomic(path, exit5, strlen(exit5), &err), 0);
    }
    assert_int_equal(mu_snprintf(tmp, sizeof(tmp), "%s.tmp", path), 0);
    assert_int_equal(stat(tmp, &st), -1); /* renamed away */
    assert_int_equal(wrk_taskexit_read(path, &x, &err), 1);
    assert_int_equal(x.exit_code, 5);
    write_file(path, "garbage", 0644);
    assert_int_equal(wrk_taskexit_read(path, &x, &err), -1);
    assert_non_null(strstr(err.msg, path));
    /* A symlink or a FIFO is not a record. */
    assert_int_equal(mu_snprintf(tmp, sizeof(tmp), "%s/link.json", dir), 0);
    assert_int_equal(symlink(path, tmp), 0);
    assert_int_equal(wrk_taskrec_read(tmp, &r, &err), -1);
    assert_int_equal(mu_snprintf(tmp, sizeof(tmp), "%s/fifo.json", dir), 0);
    assert_int_equal(mkfifo(tmp, 0600), 0);
    assert_int_equal(wrk_taskrec_read(tmp, &r, &err), -1);
    assert_non_null(strstr(err.msg, "not a regular file"));
    /* Writing into a missing directory fails with the temp file's name. */
    assert_int_equal(mu_snprintf(tmp, sizeof(tmp), "%s/nodir/x.exit", dir), 0);
    assert_int_equal(wrk_file_write_atomic(tmp, "x", 1, &err), -1);
    assert_non_null(strstr(err.msg, "x.exit.tmp"));
    rm_rf(dir);
    free(dir);
}

static void test_taskrec_remove(void **state)
{
    static const char *const names[] = { "1-0.2.3.json", "1-0.2.3.exit", "1-0.2.3.json.tmp",
                                         "1-0.2.3.exit.tmp", "1-0.2.3.fenced" };
    char *dir = make_tmpdir();
    struct proto_task_ref ref;
    struct mu_err err;
    char path[1024];
    (void)state;

    memset(&ref, 0, sizeof(ref));
    mu_strlcpy(ref.job, "1-0", sizeof(ref.job));
    ref.task = 3;
    ref.attempt = 2;
    /* Nothing there (not even tasks/): nothing to do, not an error. */
    assert_int_equal(wrk_taskrec_remove(dir, &ref, &err), 0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks", dir), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    /* Every file of the task goes; another task's record stays. */
    for (size_t i = 0; i < MU_ARRAY_LEN(names); i++) {
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/%s", dir, names[i]), 0);
        write_file(path, "{}", 0644);
    }
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/1-0.2.4.json", dir), 0);
    write_file(path, "{}", 0644);
    assert_int_equal(wrk_taskrec_remove(dir, &ref, &err), 0);
    for (size_t i = 0; i < MU_ARRAY_LEN(names); i++) {
        assert_int_equal(mu_snprintf(path, sizeof(path), "tasks/%s", names[i]), 0);
        assert_false(file_exists(dir, path));
    }
    assert_true(file_exists(dir, "tasks/1-0.2.4.json"));
    /* One that cannot go (a directory under the record's name) is named; the rest still go. */
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/1-0.2.3.json", dir), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/1-0.2.3.exit", dir), 0);
    write_file(path, "{}", 0644);
    assert_int_equal(wrk_taskrec_remove(dir, &ref, &err), -1);
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(strstr(err.msg, "cannot remove '"));
    assert_non_null(strstr(err.msg, "/tasks/1-0.2.3.json': "));
    assert_false(file_exists(dir, "tasks/1-0.2.3.exit"));
    rm_rf(dir);
    free(dir);
}

static void test_shim_spec(void **state)
{
    char a0[] = "/bin/sh", a1[] = "-c", a2[] = "echo a=b";
    char e0[] = "A=1", e1[] = "B=x=y", e2[] = "EMPTY=";
    char *argv[] = { a0, a1, a2, NULL };
    char *envp[] = { e0, e1, e2, NULL };
    gid_t groups[] = { 100, 27, 44 };
    struct wrk_shim_spec s;
    struct wrk_shim_spec d;
    struct mu_buf b;
    struct mu_err err;
    (void)state;

    memset(&s, 0, sizeof(s));
    mu_strlcpy(s.rec.ref.job, "17-0", sizeof(s.rec.ref.job));
    s.rec.ref.task = 1;
    s.rec.ref.attempt = 4;
    s.rec.ckpt_signal = SIGUSR2;
    s.rec.grace_s = 30;
    s.rec.uid = 1000;
    s.rec.ngpus = 2;
    s.rec.gpus[0] = 3;
    s.rec.gpus[1] = 5;
    s.argc = 3;
    s.argv = argv;
    s.nenv = 3;
    s.envp = envp;
    s.workdir = "/data/run";
    s.user = "alice";
    s.uid = 1000;
    s.gid = 100;
    s.groups = groups;
    s.ngroups = 3;
    mu_buf_init(&b, 0);
    assert_int_equal(wrk_shim_spec_encode(&s, &b, &err), 0);
    assert_int_equal(wrk_shim_spec_decode(b.data, b.len, &d, &err), 0);
    assert_string_equal(d.rec.ref.job, "17-0");
    assert_int_equal(d.rec.ref.task, 1);
    assert_int_equal(d.rec.ref.attempt, 4);
    assert_int_equal(d.rec.ckpt_signal, SIGUSR2);
    assert_int_equal(d.rec.grace_s, 30);
    assert_int_equal(d.rec.uid, 1000);
    assert_int_equal(d.rec.ngpus, 2);
    assert_int_equal(d.rec.gpus[1], 5);
    assert_int_equal(d.argc, 3);
    assert_string_equal(d.argv[2], "echo a=b");
    assert_null(d.argv[3]);
    assert_int_equal(d.nenv, 3);
    assert_string_equal(d.envp[1], "B=x=y");
    assert_string_equal(d.envp[2], "EMPTY=");
    assert_null(d.envp[3]);
    assert_string_equal(d.workdir, "/data/run");
    assert_string_equal(d.user, "alice");
    assert_int_equal(d.uid, 1000);
    assert_int_equal(d.gid, 100);
    assert_int_equal(d.ngroups, 3);
    assert_int_equal(d.groups[0], 100);
    assert_int_equal(d.groups[2], 44);
    wrk_shim_spec_release(&d);

    /* Bad specs: each names what is wrong, and release is safe after a failure. */
    {
        static const struct {
            const char *data;
            size_t len;
            const char *want;
        } bad[] = {
            { "", 0, "truncated" },
            { "job=1-0", 7, "truncated" },
            { "job=1-0\0arg", 12, "no '='" },
            { "job=1-0\0bogus=1\0", 16, "unknown key 'bogus'" },
            { "arg=x\0", 6, "no 'job'" },
            { "job=1-0\0", 8, "no 'arg'" },
            { "job=a/b\0arg=x\0", 14, "not a job id" },
            { "job=1-0\0task=-1\0arg=x\0", 22, "'task'" },
            { "job=1-0\0ckpt_signal=x\0arg=x\0", 28, "'ckpt_signal'" },
            { "job=1-0\0group=-5\0arg=x\0", 23, "'group'" },
        };
        for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
            mu_err_clear(&err);
            if (wrk_shim_spec_decode(bad[i].data, bad[i].len, &d, &err) != -1)
                fail_msg("case %zu decoded", i);
            if (!strstr(err.msg, bad[i].want))
                fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].want);
            wrk_shim_spec_release(&d);
        }
    }
    s.argc = 0;
    assert_int_equal(wrk_shim_spec_encode(&s, &b, &err), -1);
    mu_buf_release(&b);
}

static void test_shim_cmdline(void **state)
{
    static const char good[] = "/usr/bin/muster-shim\0/s/tasks/1-0.1.0";
    static const char bare[] = "muster-shim\0/s/tasks/1-0.1.0";
    static const char other[] = "/usr/bin/python3\0/s/tasks/1-0.1.0";
    static const char extra[] = "muster-shim\0/s/tasks/1-0.1.0\0more";
    static const char wrong[] = "muster-shim\0/s/tasks/1-0.1.1";
    static const char prefix[] = "muster-shim\0/s/tasks/1-0.1.0x";
    static const char noarg[] = "muster-shim";
    (void)state;

    assert_true(wrk_shim_cmdline_matches(good, sizeof(good), "/s/tasks/1-0.1.0"));
    assert_true(wrk_shim_cmdline_matches(bare, sizeof(bare), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(other, sizeof(other), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(extra, sizeof(extra), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(wrong, sizeof(wrong), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(prefix, sizeof(prefix), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(noarg, sizeof(noarg), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches("", 0, "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_cmdline_matches(good, 5, "/s/tasks/1-0.1.0")); /* no NUL */
    /* A record without a start time (an older version's): this process is no shim by its
     * command line; pid 0 and 1 never are. */
    assert_false(wrk_shim_is_running((int)getpid(), 0, "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_is_running(1, 0, "/s/tasks/1-0.1.0"));
}

/* A shim is known by its pid and start time: a reused pid has another start time. */
static void test_shim_start_time(void **state)
{
    /* Field 22 counted after the last ')': the name may hold spaces and parentheses. */
    static const char line[] = "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 101 0 0 0 0 0 0 0 20 "
                               "0 1 0 987654 2265088 256 18446744073709551615\n";
    static const char zombie[] = "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0\n";
    static const char *bad[] = {
        "4242 no name S 1",                                               /* no ')' */
        "4242 (x) S 1 2 3",                                               /* ends before field 22 */
        "4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12x 0\n", /* not a number */
        "4242 (x)",                                                       /* no state */
    };
    char st = 0;
    uint64_t start = 0;
    uint64_t mine;
    char base[] = "/nonexistent/tasks/1-0.1.0";
    (void)state;

    assert_int_equal(wrk_proc_stat_parse(line, strlen(line), &st, &start), 0);
    assert_int_equal(st, 'S');
    assert_true(start == 987654);
    assert_int_equal(wrk_proc_stat_parse(zombie, strlen(zombie), &st, &start), 0);
    assert_int_equal(st, 'Z');
    assert_true(start == 55);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(wrk_proc_stat_parse(bad[i], strlen(bad[i]), &st, &start), -1);

    /* This process, by its own start time, whatever its command line; not by another. */
    mine = wrk_proc_start(0);
    assert_true(mine > 0);
    assert_true(wrk_proc_start((int)getpid()) == mine);
    assert_true(wrk_shim_is_running((int)getpid(), mine, base));
    assert_false(wrk_shim_is_running((int)getpid(), mine + 1, base));
    assert_int_equal(wrk_proc_start(-1), 0);

    /* A zombie holds its pid but runs no more: not a live shim. */
    {
        pid_t child = fork();
        siginfo_t si;
        assert_true(child >= 0);
        if (child == 0)
            _exit(0);
        memset(&si, 0, sizeof(si));
        assert_int_equal(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
        assert_int_equal(wrk_proc_start((int)child), 0);
        assert_int_equal(waitpid(child, NULL, 0), child);
    }
}

/* ---- task logs for LOG_READ (logread.c) ---- */

/* A LOG_READ for job 17-0 task 1 attempt 2. */
static void log_req(struct proto_msg *m, const char *stream, uint64_t offset, int max_bytes)
{
    proto_msg_init(m, PROTO_LOG_READ);
    mu_strlcpy(m->task.job, "17-0", sizeof(m->task.job));
    m->task.task = 1;
    m->task.attempt = 2;
    mu_strlcpy(m->req, "99-1", sizeof(m->req));
    mu_strlcpy(m->stream, stream, sizeof(m->stream));
    m->offset = offset;
    m->max_bytes = max_bytes;
}

static void test_log_read(void **state)
{
    char *dir = make_tmpdir();
    char *big = malloc(PROTO_LOG_CHUNK_MAX + 5000);
    char path[512];
    struct proto_msg req;
    struct proto_msg out;

    (void)state;
    assert_non_null(big);
    (void)mu_snprintf(path, sizeof(path), "%s/logs", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    (void)mu_snprintf(path, sizeof(path), "%s/logs/17-0.2.1.out", dir);
    write_file(path, "hello\nworld\n", 0644);

    log_req(&req, "out", 0, 5);
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok);
    assert_int_equal(out.type, PROTO_LOG_DATA);
    assert_int_equal(out.data_len, 5);
    assert_memory_equal(out.data, "hello", 5);
    assert_true(out.size == 12);
    assert_string_equal(out.req, "99-1");
    assert_string_equal(out.task.job, "17-0");
    assert_string_equal(out.path, path);
    proto_msg_release(&out);

    /* An array element's log, by the element's id. */
    (void)mu_snprintf(path, sizeof(path), "%s/logs/17-0_4.2.1.out", dir);
    write_file(path, "element\n", 0644);
    log_req(&req, "out", 0, 0);
    mu_strlcpy(req.task.job, "17-0_4", sizeof(req.task.job));
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok && out.data_len == 8);
    assert_memory_equal(out.data, "element\n", 8);
    proto_msg_release(&out);

    log_req(&req, "out", 6, 0); /* the rest; 0 = up to the cap */
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok && out.data_len == 6 && out.offset == 6);
    assert_memory_equal(out.data, "world\n", 6);
    proto_msg_release(&out);
    log_req(&req, "out", 12, 0); /* at the end: ok, nothing */
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok && out.data_len == 0 && out.data == NULL && out.size == 12);
    proto_msg_release(&out);
    log_req(&req, "out", UINT64_MAX, 0); /* past it, even beyond off_t */
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok && out.data_len == 0);
    proto_msg_release(&out);

    /* A log bigger than a chunk: one chunk at most, whatever max_bytes asks. */
    memset(big, 'x', PROTO_LOG_CHUNK_MAX + 4999);
    big[PROTO_LOG_CHUNK_MAX + 4999] = '\0';
    (void)mu_snprintf(path, sizeof(path), "%s/logs/17-0.2.1.err", dir);
    write_file(path, big, 0644);
    log_req(&req, "err", 0, 0);
    wrk_log_read(dir, &req, &out);
    assert_true(out.ok && out.data_len == PROTO_LOG_CHUNK_MAX);
    assert_true(out.size == PROTO_LOG_CHUNK_MAX + 4999);
    proto_msg_release(&out);

    /* No such log: absent.  Not a log name: refused before any file is touched. */
    log_req(&req, "out", 0, 0);
    req.task.attempt = 3;
    wrk_log_read(dir, &req, &out);
    assert_false(out.ok);
    assert_true(out.absent);
    assert_non_null(strstr(out.error, "17-0.3.1.out"));
    proto_msg_release(&out);
    {
        static const char *const bad_jobs[] = {
            "../../etc/passwd", "17-0/../x", "17",         "-1", "17-", "a-1", "", "17-0_",
            "17-0_x",           "17-0_1_2",  "17-0_/../x", "_1",
        };
        for (size_t i = 0; i < MU_ARRAY_LEN(bad_jobs); i++) {
            log_req(&req, "out", 0, 0);
            mu_strlcpy(req.task.job, bad_jobs[i], sizeof(req.task.job));
            wrk_log_read(dir, &req, &out);
            assert_false(out.ok);
            assert_false(out.absent);
            assert_non_null(strstr(out.error, "is not a job id"));
            assert_string_equal(out.path, "");
            proto_msg_release(&out);
        }
    }
    log_req(&req, "../x", 0, 0);
    wrk_log_read(dir, &req, &out);
    assert_false(out.ok);
    assert_non_null(strstr(out.error, "expected \"out\" or \"err\""));
    proto_msg_release(&out);
    log_req(&req, "out", 0, 0);
    req.task.attempt = 0;
    wrk_log_read(dir, &req, &out);
    assert_false(out.ok);
    assert_non_null(strstr(out.error, "out of range"));
    proto_msg_release(&out);

    /* A symlink in the log's place is not followed; a directory is not a log. */
    (void)mu_snprintf(path, sizeof(path), "%s/logs/17-0.4.1.out", dir);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    log_req(&req, "out", 0, 0);
    req.task.attempt = 4;
    wrk_log_read(dir, &req, &out);
    assert_false(out.ok);
    assert_false(out.absent);
    proto_msg_release(&out);
    (void)mu_snprintf(path, sizeof(path), "%s/logs/17-0.5.1.out", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    req.task.attempt = 5;
    wrk_log_read(dir, &req, &out);
    assert_false(out.ok);
    assert_non_null(strstr(out.error, "not a regular file"));
    proto_msg_release(&out);

    proto_msg_release(&req);
    free(big);
    rm_rf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_parse),        cmocka_unit_test(test_ckpt_read),
        cmocka_unit_test(test_taskrec_roundtrip), cmocka_unit_test(test_taskrec_bad),
        cmocka_unit_test(test_taskexit),          cmocka_unit_test(test_taskrec_files),
        cmocka_unit_test(test_taskrec_remove),    cmocka_unit_test(test_shim_spec),
        cmocka_unit_test(test_shim_cmdline),      cmocka_unit_test(test_shim_start_time),
        cmocka_unit_test(test_log_read),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

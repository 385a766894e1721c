/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the pieces of the worker that keep two attempts of a gang apart (issue #10
 * item 1, protocol/README.md "The lease and stale commands"): the lease record <state-dir>/lease
 * (hostile files: garbage, a wrong size, a symlink, a FIFO; two mappings seeing each other's
 * stores; a restarted writer keeping the values) and its renewal by round trip (a stale or
 * refused answer renews nothing), the KILL tombstones, the lower bound of the scheduler's
 * clock, which BINDs are stale and their start deadline, the spawn child's check of it, and the
 * shim's "fenced" exit record and spec keys.  The agent's use of them is in test_wrk_fence.c,
 * against the fake scheduler of support/wrk_fake.c, whose temp directories these tests share.
 */
#include <fcntl.h>
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

static void write_bytes(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return st.st_size;
}

/* ---- the lease record ---- */

static void test_lease_roundtrip(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    struct wrk_lease *w;
    struct wrk_lease *r;
    struct wrk_lease *r2;
    struct mu_err err;
    struct stat before;
    struct stat after;
    uint64_t until = 1;
    int lease_s = -1;
    (void)state;

    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", dir), 0);
    /* A reader finds nothing to read; the writer creates a record without a lease. */
    assert_null(wrk_lease_new(path, false, &err));
    assert_int_equal(err.code, MU_E_NOTFOUND);
    w = wrk_lease_new(path, true, &err);
    if (!w)
        fail_msg("%s", err.msg);
    assert_int_equal(file_size(path), 24);
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 0);
    assert_true(until == 0);

    /* Two mappings of one file see each other's stores at once. */
    r = wrk_lease_new(path, false, &err);
    if (!r)
        fail_msg("%s", err.msg);
    wrk_lease_write(w, 4, UINT64_C(123456789012));
    wrk_lease_read(r, &lease_s, &until);
    assert_int_equal(lease_s, 4);
    assert_true(until == UINT64_C(123456789012));
    wrk_lease_write(w, 4, UINT64_C(5000)); /* shortened: the reader sees that too */
    wrk_lease_read(r, NULL, &until);
    assert_true(until == 5000);

    /* A second writer (a restarted worker) keeps the values and the inode: running shims keep
     * their mapping and see its stores. */
    assert_int_equal(stat(path, &before), 0);
    wrk_lease_free(w);
    w = wrk_lease_new(path, true, &err);
    if (!w)
        fail_msg("%s", err.msg);
    assert_int_equal(stat(path, &after), 0);
    assert_true(before.st_ino == after.st_ino);
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 4);
    assert_true(until == 5000);
    wrk_lease_write(w, 5, UINT64_C(99));
    wrk_lease_read(r, &lease_s, &until);
    assert_int_equal(lease_s, 5);
    assert_true(until == 99);

    /* The mapping outlives the path: unlinked, it still reads the last value. */
    r2 = wrk_lease_new(path, false, &err);
    if (!r2)
        fail_msg("%s", err.msg);
    assert_int_equal(unlink(path), 0);
    wrk_lease_write(w, 5, UINT64_C(100));
    wrk_lease_read(r2, NULL, &until);
    assert_true(until == 100);
    wrk_lease_free(r2);
    wrk_lease_free(r);
    wrk_lease_free(w);
    wrk_lease_free(NULL);
    rm_rf(dir);
    free(dir);
}

static void test_lease_hostile(void **state)
{
    static const char garbage[24] = "not a lease record!!!!!";
    char *dir = make_tmpdir();
    char path[1024];
    char target[1100];
    struct wrk_lease *l;
    struct mu_err err;
    struct stat st;
    uint64_t until = 1;
    (void)state;

    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", dir), 0);

    /* The right size, the wrong magic: a reader refuses it, the writer replaces it. */
    write_bytes(path, garbage, sizeof(garbage));
    assert_null(wrk_lease_new(path, false, &err));
    assert_int_equal(err.code, MU_E_PARSE);
    assert_non_null(strstr(err.msg, "is not a lease record"));
    l = wrk_lease_new(path, true, &err);
    if (!l)
        fail_msg("%s", err.msg);
    wrk_lease_read(l, NULL, &until);
    assert_true(until == 0);
    wrk_lease_free(l);
    l = wrk_lease_new(path, false, &err); /* now a reader takes it */
    if (!l)
        fail_msg("%s", err.msg);
    wrk_lease_free(l);

    /* A wrong size: too short, too long, empty. */
    write_bytes(path, garbage, 8);
    assert_null(wrk_lease_new(path, false, &err));
    assert_non_null(strstr(err.msg, "is 8 bytes, not a lease record of 24"));
    {
        char big[48];
        memset(big, 0, sizeof(big));
        write_bytes(path, big, sizeof(big));
        assert_null(wrk_lease_new(path, false, &err));
        assert_non_null(strstr(err.msg, "is 48 bytes"));
        write_bytes(path, big, 0);
        assert_null(wrk_lease_new(path, false, &err));
        assert_non_null(strstr(err.msg, "is 0 bytes"));
    }
    l = wrk_lease_new(path, true, &err);
    if (!l)
        fail_msg("%s", err.msg);
    assert_int_equal(file_size(path), 24);
    wrk_lease_free(l);

    /* A symlink is refused by a reader, even to a valid record, and replaced by the writer
     * (the link itself: its target is untouched). */
    assert_int_equal(mu_snprintf(target, sizeof(target), "%s/elsewhere", dir), 0);
    assert_int_equal(rename(path, target), 0);
    assert_int_equal(symlink(target, path), 0);
    assert_null(wrk_lease_new(path, false, &err));
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(strstr(err.msg, "cannot open"));
    l = wrk_lease_new(path, true, &err);
    if (!l)
        fail_msg("%s", err.msg);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(file_size(target), 24);
    wrk_lease_free(l);

    /* A FIFO does not block the open and is not a record. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_null(wrk_lease_new(path, false, &err));
    assert_non_null(strstr(err.msg, "is not a regular file"));
    l = wrk_lease_new(path, true, &err);
    if (!l)
        fail_msg("%s", err.msg);
    wrk_lease_free(l);

    /* A directory in its place cannot be replaced: an error, nothing removed. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_null(wrk_lease_new(path, true, &err));
    assert_non_null(strstr(err.msg, "lease"));
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    rm_rf(dir);
    free(dir);
}

static void test_lease_renew(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    struct wrk_lease *w;
    struct mu_err err;
    uint64_t until = 0;
    int lease_s = 0;
    (void)state;

    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", dir), 0);
    w = wrk_lease_new(path, true, &err);
    if (!w)
        fail_msg("%s", err.msg);
    /* No lease yet: nothing to hold, tasks may start. */
    assert_true(wrk_lease_holds(w, 1000));
    /* Not an answer (no echo): nothing changes. */
    assert_false(wrk_lease_renew(w, 4, 0, true, 1000));
    /* An answer: held until echo + lease. */
    assert_true(wrk_lease_renew(w, 4, 900, true, 1000));
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 4);
    assert_true(until == 4900);
    assert_true(wrk_lease_holds(w, 4899));
    assert_false(wrk_lease_holds(w, 4900));
    /* A newer answer renews; an older one (it sat in a socket) does not, even much later. */
    assert_true(wrk_lease_renew(w, 4, 2000, true, 2100));
    assert_false(wrk_lease_renew(w, 4, 1500, true, 2200));
    wrk_lease_read(w, NULL, &until);
    assert_true(until == 6000);
    /* "I do not know you" renews nothing; neither does an echo from the future. */
    assert_false(wrk_lease_renew(w, 4, 3000, false, 3100));
    assert_false(wrk_lease_renew(w, 4, 9000, true, 3100));
    wrk_lease_read(w, NULL, &until);
    assert_true(until == 6000);
    /* A shorter lease_s shortens it from the newest echo; lease_s 0 keeps the one known. */
    assert_true(wrk_lease_renew(w, 2, 3000, true, 3100));
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 2);
    assert_true(until == 5000);
    assert_true(wrk_lease_renew(w, 0, 3500, true, 3600));
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 2);
    assert_true(until == 5500);
    wrk_lease_free(w);

    /* A restarted worker keeps what it finds (the shims honour it) until its first answer,
     * which sets the lease even when that is shorter (clocks restart at boot). */
    w = wrk_lease_new(path, true, &err);
    if (!w)
        fail_msg("%s", err.msg);
    wrk_lease_read(w, &lease_s, &until);
    assert_int_equal(lease_s, 2);
    assert_true(until == 5500);
    assert_true(wrk_lease_renew(w, 2, 100, true, 150));
    wrk_lease_read(w, NULL, &until);
    assert_true(until == 2100);
    wrk_lease_free(w);
    rm_rf(dir);
    free(dir);
}

/* ---- stale commands ---- */

static void test_tombs(void **state)
{
    struct wrk_tombs *t = calloc(1, sizeof(*t));
    struct proto_task_ref ref;
    (void)state;

    assert_non_null(t);
    memset(&ref, 0, sizeof(ref));
    mu_strlcpy(ref.job, "1-0", sizeof(ref.job));
    ref.task = 1;
    ref.attempt = 2;
    assert_false(wrk_tombs_has(t, &ref));
    wrk_tombs_add(t, &ref);
    wrk_tombs_add(t, &ref); /* a repeated KILL is one entry */
    assert_int_equal(t->n, 1);
    assert_true(wrk_tombs_has(t, &ref));
    ref.attempt = 3;
    assert_false(wrk_tombs_has(t, &ref)); /* another attempt of the same task */
    ref.attempt = 2;
    ref.task = 0;
    assert_false(wrk_tombs_has(t, &ref));
    /* The ring keeps the newest WRK_TOMBS_MAX: the first is forgotten after that many more. */
    ref.task = 1;
    for (int i = 0; i < WRK_TOMBS_MAX; i++) {
        struct proto_task_ref other = ref;
        (void)mu_snprintf(other.job, sizeof(other.job), "2-%d", i);
        wrk_tombs_add(t, &other);
    }
    assert_int_equal(t->n, WRK_TOMBS_MAX);
    assert_false(wrk_tombs_has(t, &ref));
    (void)mu_snprintf(ref.job, sizeof(ref.job), "2-%d", WRK_TOMBS_MAX - 1);
    assert_true(wrk_tombs_has(t, &ref));
    (void)mu_snprintf(ref.job, sizeof(ref.job), "2-0");
    assert_true(wrk_tombs_has(t, &ref));
    free(t);
}

static void test_sched_clock(void **state)
{
    struct wrk_sched_clock c;
    uint64_t v = 0;
    (void)state;

    memset(&c, 0, sizeof(c));
    assert_false(wrk_sched_clock_bound(&c, 1000, &v));
    assert_false(wrk_sched_clock_local(&c, 1000, &v));
    wrk_sched_clock_note(&c, 3, 0, 1000); /* not stamped: still unknown */
    assert_false(wrk_sched_clock_bound(&c, 1000, &v));

    /* The scheduler's clock is 50 000 ahead, and the fastest message shows it best. */
    wrk_sched_clock_note(&c, 3, 50900, 1000); /* 100 ms on the way */
    assert_true(wrk_sched_clock_bound(&c, 2000, &v));
    assert_true(v == 51900);
    wrk_sched_clock_note(&c, 3, 51990, 2000); /* 10 ms on the way: a better bound */
    assert_true(wrk_sched_clock_bound(&c, 2000, &v));
    assert_true(v == 51990);
    wrk_sched_clock_note(&c, 3, 40000, 3000); /* sat in a socket: changes nothing */
    assert_true(wrk_sched_clock_bound(&c, 3000, &v));
    assert_true(v == 52990);
    assert_true(wrk_sched_clock_local(&c, 60000, &v));
    assert_true(v == 10010);
    assert_true(wrk_sched_clock_local(&c, 10, &v));
    assert_true(v == 1); /* long past, still a deadline */

    /* Behind us by more than our clock reads: the bound stops at 0. */
    wrk_sched_clock_note(&c, 4, 100, 5000);
    assert_true(wrk_sched_clock_bound(&c, 4000, &v));
    assert_true(v == 0);
    /* A new epoch starts over: a slower (restarted) scheduler clock is believed. */
    wrk_sched_clock_note(&c, 5, 7000, 6000);
    assert_true(wrk_sched_clock_bound(&c, 6000, &v));
    assert_true(v == 7000);
    /* Garbage stamps are ignored. */
    wrk_sched_clock_note(&c, 5, UINT64_MAX, 6000);
    assert_true(wrk_sched_clock_bound(&c, 6000, &v));
    assert_true(v == 7000);
}

static void test_bind_stale(void **state)
{
    char *dir = make_tmpdir();
    char path[1024];
    struct wrk_tombs *t = calloc(1, sizeof(*t));
    struct wrk_sched_clock c;
    struct wrk_lease *l;
    struct proto_msg m;
    struct mu_err err;
    char why[256];
    (void)state;

    assert_non_null(t);
    memset(&c, 0, sizeof(c));
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", dir), 0);
    l = wrk_lease_new(path, true, &err);
    if (!l)
        fail_msg("%s", err.msg);
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, "7-0", sizeof(m.task.job));
    m.task.attempt = 1;

    /* No lease, no stamps, no tombstone: fresh, and no deadline. */
    assert_false(wrk_bind_is_stale(t, &c, l, &m, 10000, why, sizeof(why)));
    assert_true(wrk_bind_deadline(&c, l, &m) == 0);

    /* The scheduler's clock is 100 000 ahead; the BIND expires at its 109 000. */
    wrk_sched_clock_note(&c, 1, 108000, 8000);
    m.expires_ms = 109000;
    assert_false(wrk_bind_is_stale(t, &c, l, &m, 8500, why, sizeof(why)));
    assert_true(wrk_bind_deadline(&c, l, &m) == 9000);
    assert_true(wrk_bind_is_stale(t, &c, l, &m, 9812, why, sizeof(why)));
    assert_string_equal(why,
                        "stale BIND: the scheduler gave this attempt up 812 ms ago (expires_ms)");

    /* A lease that holds until 8700 comes before the expiry; once out, nothing starts. */
    assert_true(wrk_lease_renew(l, 4, 4700, true, 8000));
    assert_true(wrk_bind_deadline(&c, l, &m) == 8700);
    m.expires_ms = 0;
    assert_false(wrk_bind_is_stale(t, &c, l, &m, 8600, why, sizeof(why)));
    assert_true(wrk_bind_deadline(&c, l, &m) == 8700);
    assert_true(wrk_bind_is_stale(t, &c, l, &m, 11900, why, sizeof(why)));
    assert_string_equal(
        why, "not started: this node's lease ran out 3.2 s ago (no word from the scheduler)");

    /* A KILL of the task came first: refused whatever else holds. */
    assert_true(wrk_lease_renew(l, 4, 11000, true, 11900));
    assert_false(wrk_bind_is_stale(t, &c, l, &m, 12000, why, sizeof(why)));
    wrk_tombs_add(t, &m.task);
    assert_true(wrk_bind_is_stale(t, &c, l, &m, 12000, why, sizeof(why)));
    assert_string_equal(why, "not started: a KILL for this task arrived first");
    proto_msg_release(&m);
    wrk_lease_free(l);
    free(t);
    rm_rf(dir);
    free(dir);
}

/* ---- the spawn child's start deadline ---- */

static void test_spawn_deadline(void **state)
{
    char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)"exit 4", NULL };
    char *noexec[] = { (char *)"/nonexistent/muster-prog", NULL };
    struct wrk_spawn s;
    enum wrk_fault fault = WRK_FAULT_JOB;
    struct mu_err err;
    pid_t pid = -1;
    int status = 0;
    (void)state;

    memset(&s, 0, sizeof(s));
    s.argv = argv;
    s.fd_stdin = s.fd_stdout = s.fd_stderr = -1;
    /* Passed: nothing runs, and the error says why; the node's fault. */
    s.not_after_ms = mu_time_mono_ms() - 1;
    assert_int_equal(wrk_spawn_start(&s, &pid, &fault, &err), -1);
    assert_string_equal(err.msg, "not started: the start deadline passed before exec");
    assert_int_equal(fault, WRK_FAULT_NODE);
    /* Through fork too (not an absolute path). */
    argv[0] = (char *)"sh";
    s.not_after_ms = 1;
    assert_int_equal(wrk_spawn_start(&s, &pid, NULL, &err), -1);
    assert_string_equal(err.msg, "not started: the start deadline passed before exec");
    /* Ahead: it runs. */
    s.not_after_ms = mu_time_mono_ms() + 60000;
    assert_int_equal(wrk_spawn_start(&s, &pid, &fault, &err), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 4);
    /* An exec that cannot find its program is the job's fault; a workdir that is missing too. */
    s.argv = noexec;
    s.not_after_ms = 0;
    assert_int_equal(wrk_spawn_start(&s, &pid, &fault, &err), -1);
    assert_int_equal(fault, WRK_FAULT_JOB);
    assert_string_equal(err.msg,
                        "cannot run '/nonexistent/muster-prog': No such file or directory");
    s.argv = argv;
    s.workdir = "/nonexistent/muster-dir";
    assert_int_equal(wrk_spawn_start(&s, &pid, &fault, &err), -1);
    assert_int_equal(fault, WRK_FAULT_JOB);
    assert_non_null(strstr(err.msg, "workdir '/nonexistent/muster-dir'"));
}

/* ---- the exit record and the shim's spec ---- */

static void test_exit_fenced(void **state)
{
    struct wrk_taskexit x;
    struct wrk_taskexit back;
    struct mu_err err;
    char buf[160];
    (void)state;

    memset(&x, 0, sizeof(x));
    x.signal = SIGTERM;
    x.ended_ms = 17;
    x.fenced = true;
    assert_int_equal(wrk_taskexit_format(&x, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "{\"exit_code\":0,\"signal\":15,\"ended_ms\":17,\"fenced\":true}\n");
    assert_int_equal(wrk_taskexit_parse(buf, strlen(buf), &back, &err), 0);
    assert_true(back.fenced);
    assert_int_equal(back.signal, SIGTERM);
    x.fenced = false;
    assert_int_equal(wrk_taskexit_format(&x, buf, sizeof(buf), &err), 0);
    assert_null(strstr(buf, "fenced")); /* an older worker reads it as before */
    assert_int_equal(wrk_taskexit_parse(buf, strlen(buf), &back, &err), 0);
    assert_false(back.fenced);
    {
        static const char bad[] = "{\"exit_code\":0,\"signal\":0,\"fenced\":1}";
        static const char no[] = "{\"exit_code\":0,\"signal\":0,\"fenced\":false}";
        assert_int_equal(wrk_taskexit_parse(bad, strlen(bad), &back, &err), -1);
        assert_non_null(strstr(err.msg, "\"fenced\": expected true or false"));
        assert_int_equal(wrk_taskexit_parse(no, strlen(no), &back, &err), 0);
        assert_false(back.fenced);
    }
}

static void test_spec_lease(void **state)
{
    char a0[] = "/bin/true";
    char *argv[] = { a0, NULL };
    char *envp[] = { NULL };
    struct wrk_shim_spec s;
    struct wrk_shim_spec d;
    struct mu_buf b;
    struct mu_err err;
    (void)state;

    memset(&s, 0, sizeof(s));
    mu_strlcpy(s.rec.ref.job, "5-0", sizeof(s.rec.ref.job));
    s.rec.ref.attempt = 1;
    s.argc = 1;
    s.argv = argv;
    s.envp = envp;
    s.lease_path = "/var/lib/muster/lease";
    s.not_after_ms = UINT64_C(987654321);
    mu_buf_init(&b, 0);
    assert_int_equal(wrk_shim_spec_encode(&s, &b, &err), 0);
    assert_int_equal(wrk_shim_spec_decode(b.data, b.len, &d, &err), 0);
    assert_string_equal(d.lease_path, "/var/lib/muster/lease");
    assert_true(d.not_after_ms == UINT64_C(987654321));
    wrk_shim_spec_release(&d);
    mu_buf_release(&b);
    /* Without them: none. */
    s.lease_path = NULL;
    s.not_after_ms = 0;
    mu_buf_init(&b, 0);
    assert_int_equal(wrk_shim_spec_encode(&s, &b, &err), 0);
    assert_int_equal(wrk_shim_spec_decode(b.data, b.len, &d, &err), 0);
    assert_null(d.lease_path);
    assert_true(d.not_after_ms == 0);
    wrk_shim_spec_release(&d);
    mu_buf_release(&b);
    {
        static const char bad[] = "job=1-0\0not_after_ms=-5\0arg=x\0";
        assert_int_equal(wrk_shim_spec_decode(bad, sizeof(bad) - 1, &d, &err), -1);
        assert_non_null(strstr(err.msg, "'not_after_ms'"));
        wrk_shim_spec_release(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_roundtrip), cmocka_unit_test(test_lease_hostile),
        cmocka_unit_test(test_lease_renew),     cmocka_unit_test(test_tombs),
        cmocka_unit_test(test_sched_clock),     cmocka_unit_test(test_bind_stale),
        cmocka_unit_test(test_spawn_deadline),  cmocka_unit_test(test_exit_fenced),
        cmocka_unit_test(test_spec_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

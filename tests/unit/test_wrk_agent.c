/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the agent's loop and its commands (worker/agent.c, handlers.c, send.c,
 * ckpt_watch.c, ident.c), driven against an in-process ROUTER standing in for the scheduler
 * (support/wrk_fake.c): HELLO with islands and labels, BIND, KILL, CHECKPOINT and their
 * failures, repeats until acknowledged, re-registration (and a scheduler that answers one
 * heartbeat in two), shutdown; checkpoints reported by real
 * tasks (temp file and rename, just before exit, garbage, a path missing here,
 * MUSTER_RESUME_FROM); spot notices from the metadata service stand-in; and a root worker
 * refusing or switching users (--allow-user).
 */
#include <inttypes.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- the protocol ---- */

static void agent_bind_and_exit(struct fake_sched *f)
{
    struct proto_msg m;
    char path[1024];
    char *text;
    int pid;

    /* BIND: started, acknowledged with the pid, acknowledged again on a repeat. */
    send_bind(f, "1732-0", 1,
              "echo $RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES $MASTER_ADDR $MASTER_PORT "
              "$FROM_SPEC; exit 3",
              1, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    assert_int_equal(m.epoch, 5);
    assert_string_equal(m.task.job, "1732-0");
    assert_int_equal(m.task.task, 1);
    assert_int_equal(m.task.attempt, 1);
    assert_int_equal(m.task.state, PROTO_TASK_RUNNING);
    pid = m.task.pid;
    assert_true(pid > 0);
    proto_msg_release(&m);
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 3);
    assert_int_equal(m.task.signal, 0);
    assert_int_equal(m.task.pid, pid);
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/1732-0.1.1.out", f->dir), 0);
    text = mu_file_read(path, 4096, NULL, NULL);
    assert_non_null(text);
    assert_string_equal(text, "1 2 1 10.0.0.9 29500 yes\n");
    free(text);

    send_bind(f, "1732-0", 1, "exit 0", 1, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    assert_int_equal(m.task.pid, pid); /* the same task, not a second start */
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    proto_msg_release(&m);
}

static void agent_exited_until_acked(struct fake_sched *f)
{
    struct proto_msg m;

    /* Not acknowledged yet: the exit is reported again (a TASK_STATUS can be lost). */
    send_simple(f, PROTO_HEARTBEAT, "", 0, 0, 1, 0, 5); /* ok = true: the scheduler is there */
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 3000));
    assert_string_equal(m.task.job, "1732-0");
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 3);
    proto_msg_release(&m);

    /* An exited task is reported in HELLO until a KILL acknowledges it; then it is forgotten
     * without another reply (the scheduler already has the exit status). */
    send_simple(f, PROTO_HEARTBEAT, "", 0, 0, 0, 0, 5); /* ok = false: who are you? */
    assert_true(expect_msg(f, PROTO_HELLO, &m, 5000));
    assert_int_equal(m.ntasks, 1);
    assert_string_equal(m.tasks[0].job, "1732-0");
    assert_int_equal(m.tasks[0].state, PROTO_TASK_EXITED);
    assert_int_equal(m.tasks[0].exit_code, 3);
    proto_msg_release(&m);
    assert_int_equal(wrk_agent_task_count(f->agent), 1);
    send_simple(f, PROTO_KILL, "1732-0", 1, 1, 0, 0, 5);
    for (int i = 0; i < 500 && wrk_agent_task_count(f->agent) != 0; i++) {
        struct mu_err err;
        assert_true(wrk_agent_poll(f->agent, 10, &err) >= 0);
    }
    assert_int_equal(wrk_agent_task_count(f->agent), 0);

    /* KILL of an unknown task: LOST. */
    send_simple(f, PROTO_KILL, "1732-0", 1, 1, 0, 0, 5);
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.state, PROTO_TASK_LOST);
    proto_msg_release(&m);
}

static void agent_bind_failures(struct fake_sched *f)
{
    struct proto_msg m;

    /* Launch failures come back as BIND_ACK ok=false with the reason. */
    send_bind(f, "1733-0", 0, "exit 0", 7, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_false(m.ok);
    assert_string_equal(m.error, "gpu 7 is not on this node");
    assert_true(m.node_fault); /* the scheduler's view of the node is wrong, not the job */
    proto_msg_release(&m);
    {
        const char *argv[] = { "nosuchcmd-muster" };
        struct mu_err err;
        struct proto_msg b;
        proto_msg_init(&b, PROTO_BIND);
        mu_strlcpy(b.task.job, "1734-0", sizeof(b.task.job));
        b.task.attempt = 1;
        assert_int_equal(proto_msg_set_argv(&b, 1, argv, &err), 0);
        send_to_worker(f, &b, 5);
        proto_msg_release(&b);
    }
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_false(m.ok);
    assert_string_equal(m.error, "cannot run 'nosuchcmd-muster': No such file or directory");
    assert_false(m.node_fault); /* the job's command: any node would refuse it */
    proto_msg_release(&m);
    assert_int_equal(wrk_agent_task_count(f->agent), 0);

    /* A command from an older epoch is ignored. */
    send_bind(f, "1735-0", 0, "exit 0", 0, 4);
    assert_false(expect_msg(f, PROTO_BIND_ACK, &m, 300));
    assert_int_equal(wrk_agent_task_count(f->agent), 0);

    /* Garbage is dropped and the loop goes on. */
    assert_int_equal(zmq_send(f->router, "n1", 2, ZMQ_SNDMORE), 2);
    assert_int_equal(zmq_send(f->router, "\xc1junk", 5, 0), 5);
}

static void agent_kill_and_checkpoint(struct fake_sched *f)
{
    struct proto_msg m;

    /* KILL of a running task reaches its whole group; SIGKILL after the grace period. */
    send_bind(f, "1736-0", 0, "sleep 100 & wait", 0, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    proto_msg_release(&m);
    send_simple(f, PROTO_KILL, "1736-0", 0, 1, 0, 30, 5);
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.signal, SIGTERM);
    proto_msg_release(&m);

    send_bind(f, "1737-0", 0, "trap '' TERM; echo ready; sleep 100 & wait; sleep 100", 0, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    proto_msg_release(&m);
    assert_true(wait_log(f, "1737-0.1.0.out", "ready\n"));
    send_simple(f, PROTO_KILL, "1737-0", 0, 1, SIGTERM, 1, 5);
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.signal, SIGKILL);
    proto_msg_release(&m);

    /* CHECKPOINT sends its signal to the group: the task's trap turns it into an exit. */
    send_bind(f, "1738-0", 0, "trap 'exit 42' USR1; echo ready; sleep 100 & wait", 0, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    proto_msg_release(&m);
    assert_true(wait_log(f, "1738-0.1.0.out", "ready\n")); /* the trap is set */
    send_simple(f, PROTO_CHECKPOINT, "1738-0", 0, 1, SIGUSR1, 0, 5);
    assert_true(expect_msg(f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.exit_code, 42);
    proto_msg_release(&m);
}

static void agent_shutdown_reports(struct fake_sched *f)
{
    struct proto_msg m;

    /* Shutdown stops running tasks and reports them. */
    send_bind(f, "1739-0", 0, "sleep 100", 0, 5);
    assert_true(expect_msg(f, PROTO_BIND_ACK, &m, 5000));
    proto_msg_release(&m);
    wrk_agent_stop(f->agent);
    {
        struct mu_err err;
        assert_int_equal(wrk_agent_poll(f->agent, 10, &err), 0);
    }
    wrk_agent_shutdown(f->agent);
    {
        char id[PROTO_NODE_MAX];
        bool seen = false;
        for (int i = 0; i < 200 && !seen; i++) {
            while (!seen && fake_recv(f, id, sizeof(id), &m) == 1) {
                seen = m.type == PROTO_TASK_STATUS && strcmp(m.task.job, "1739-0") == 0;
                if (seen)
                    assert_int_equal(m.task.signal, SIGTERM);
                proto_msg_release(&m);
            }
            if (!seen)
                sleep_ms(10);
        }
        assert_true(seen);
    }
}

static void test_agent_protocol(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    (void)state;

    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    assert_string_equal(m.node, "n1");
    assert_string_equal(m.pool, "p5-spot");
    assert_string_equal(m.addr, "10.0.0.9");
    assert_string_equal(m.instance_id, "i-0123456789abcdef0"); /* --instance-id */
    assert_int_equal(m.cpus, 4);
    assert_int_equal(m.memory_mb, 1000);
    assert_int_equal(m.ngpus, 2);
    assert_string_equal(m.gpus[1].model, "simulated");
    /* --gpu-islands 1,1: each GPU its own island. */
    assert_int_equal(m.gpus[0].island, 0);
    assert_int_equal(m.gpus[1].island, 1);
    /* Every label, in the order given: the scheduler needs one per configured level. */
    assert_int_equal(m.nlabels, 3);
    assert_string_equal(m.labels[0].level, "zone");
    assert_string_equal(m.labels[0].value, "us-east-1a");
    assert_string_equal(m.labels[1].level, "block");
    assert_string_equal(m.labels[1].value, "b-07");
    assert_string_equal(m.labels[2].level, "rack");
    assert_string_equal(m.labels[2].value, "r.12:3");
    assert_int_equal(m.ntasks, 0);
    assert_int_equal(m.epoch, 0);
    proto_msg_release(&m);
    send_simple(&f, PROTO_HEARTBEAT, "", 0, 0, 1, 0, 5); /* ok = true */

    agent_bind_and_exit(&f);
    agent_exited_until_acked(&f);
    agent_bind_failures(&f);
    agent_kill_and_checkpoint(&f);
    agent_shutdown_reports(&f);
    fake_sched_stop(&f);
}

static void test_agent_reregisters(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    (void)state;

    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_simple(&f, PROTO_HEARTBEAT, "", 0, 0, 1, 0, 2);
    /* Known to the scheduler: heartbeats follow, no HELLO. */
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 3000));
    assert_int_equal(m.epoch, 2);
    proto_msg_release(&m);
    /* Silence for 3 heartbeats: the worker registers again. */
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    assert_int_equal(m.epoch, 2);
    proto_msg_release(&m);
    fake_sched_stop(&f);
}

/*
 * A scheduler that answers one heartbeat in 2 (issue #15): the worker says 2 back in its
 * heartbeats and calls it unreachable only after 2 + 2 silent beats, never sooner (the HELLO's
 * echo_ms is its clock when it gave up); after that it expects every answer again.
 */
static void test_agent_answer_every(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct proto_msg answer;
    uint64_t answered_ms;
    (void)state;

    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    proto_msg_init(&answer, PROTO_HEARTBEAT);
    answer.ok = true;
    answer.heartbeat_s = 1;
    answer.answer_every = 2;
    answer.echo_ms = f.last_echo_ms;
    answered_ms = mu_time_mono_ms();
    send_to_worker(&f, &answer, 2);
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 3000));
    assert_int_equal(m.answer_every, 2);
    proto_msg_release(&m);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 8000));
    assert_true(m.echo_ms >= answered_ms + 4000);
    proto_msg_release(&m);

    answer.answer_every = 0; /* an older scheduler: every heartbeat answered */
    answer.echo_ms = f.last_echo_ms;
    send_to_worker(&f, &answer, 2);
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 3000));
    assert_int_equal(m.answer_every, 0);
    proto_msg_release(&m);
    proto_msg_release(&answer);
    fake_sched_stop(&f);
}

/* The HELLO's GPUs are n, in islands want[0..n-1], with the three labels. */
static void check_hello_islands(const struct proto_msg *m, int n, const int *want)
{
    if (m->type != PROTO_HELLO || m->ngpus != n || !m->gpus) {
        fail_msg("HELLO with %d GPUs, want %d", m->ngpus, n);
        return; /* fail_msg does not return; this tells the analyzer so */
    }
    for (int i = 0; i < n; i++) {
        if (m->gpus[i].island != want[i])
            fail_msg("GPU %d in island %d, want %d", i, m->gpus[i].island, want[i]);
    }
    assert_int_equal(m->nlabels, 3);
}

static void test_agent_islands(void **state)
{
    static const int two_two_four[] = { 0, 0, 1, 1, 2, 2, 2, 2 };
    static const int pairs[] = { 0, 0, 1, 1 };
    static const int one[] = { 0, 0, 0, 0 };
    struct fake_sched f;
    struct proto_msg m;
    char *dir = make_tmpdir();
    char prog[1024];
    char cmd[1200];
    (void)state;

    memset(&m, 0, sizeof(m));
    /* Simulated: --gpu-islands 2,2,4 on 8 GPUs. */
    fake_sched_start_with(&f, 8, "2,2,4", NULL);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    check_hello_islands(&m, 8, two_two_four);
    proto_msg_release(&m);
    fake_sched_stop(&f);

    /* Simulated, no list: one island. */
    fake_sched_start_with(&f, 4, NULL, NULL);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    check_hello_islands(&m, 4, one);
    proto_msg_release(&m);
    fake_sched_stop(&f);

    /* Discovered: the CSV for the GPUs, the topology matrix for their islands. */
    cat_data(cmd, sizeof(cmd), "topo-nvlink-pairs.txt");
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-pairs", "g6e.12xlarge.csv", "cat", cmd);
    fake_sched_start_with(&f, -1, NULL, prog);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    check_hello_islands(&m, 4, pairs);
    assert_string_equal(m.gpus[0].model, "NVIDIA L40S");
    assert_string_equal(m.gpus[3].uuid, "GPU-ec66a787-95e7-61d1-7731-af10506bf2ef");
    proto_msg_release(&m);
    fake_sched_stop(&f);

    /* Discovered, but topo -m fails: a warning, and one island (the agent still starts). */
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-notopo", "g6e.12xlarge.csv", "cat",
                "echo 'Failed to initialize NVML: Unknown Error' >&2; exit 3");
    fake_sched_start_with(&f, -1, NULL, prog);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    check_hello_islands(&m, 4, one);
    proto_msg_release(&m);
    fake_sched_stop(&f);
    /* A hand-filled sim_island out of range is refused with a message. */
    {
        struct wrk_config cfg;
        struct mu_err err;
        memset(&cfg, 0, sizeof(cfg));
        cfg.scheduler = "ipc:///nonexistent/muster-test";
        cfg.node = "n1";
        cfg.pool = "p";
        cfg.state_dir = dir;
        cfg.addr = "127.0.0.1";
        cfg.sim_gpus = 2;
        cfg.sim_island[1] = 2;
        assert_null(wrk_agent_new(&cfg, &err));
        assert_string_equal(err.msg, "simulated GPU 1: island 2 out of 0..1");
    }
    rm_rf(dir);
    free(dir);
}

/* ---- checkpoints and spot notices ---- */

static void send_bind_resume(struct fake_sched *f,
                             const char *job,
                             const char *script,
                             const char *resume_from)
{
    const char *argv[] = { "/bin/sh", "-c", script };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.task = 0;
    m.task.attempt = 2;
    m.world_size = 1;
    m.local_world_size = 1;
    m.nnodes = 1;
    mu_strlcpy(m.master_addr, "10.0.0.9", sizeof(m.master_addr));
    m.master_port = 29500;
    if (resume_from)
        mu_strlcpy(m.resume_from, resume_from, sizeof(m.resume_from));
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

/* Saves checkpoint NAME in the task's directory (the state dir) and reports its path the way
 * tasks are told to: a temp file, then rename.  ck_path gives the path the worker reports. */
#define CKPT_WRITE(name)                                                                           \
    ": > \"$PWD/" name "\" && printf '%s\\n' \"$PWD/" name "\" > \"$MUSTER_CHECKPOINT_FILE.tmp\" " \
    "&& mv \"$MUSTER_CHECKPOINT_FILE.tmp\" \"$MUSTER_CHECKPOINT_FILE\"; "

static const char *ck_path(const struct fake_sched *f, const char *name, char *buf, size_t size)
{
    assert_int_equal(mu_snprintf(buf, size, "%s/%s", f->dir, name), 0);
    return buf;
}

static void test_agent_checkpoints(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    char paths[8][PROTO_PATH_MAX];
    char *text;
    char path[1024];
    uint64_t t0;
    int n;
    (void)state;

    /* A stale value in the worker's own environment must not reach a fresh attempt. */
    assert_int_equal(setenv("MUSTER_RESUME_FROM", "/stale", 1), 0);
    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_simple(&f, PROTO_HEARTBEAT, "", 0, 0, 1, 0, 5);

    /* A running task reports a checkpoint: CHECKPOINT_DONE within a second, with its mtime. */
    send_bind_resume(&f, "1800-0", "echo ready; sleep 0.3; " CKPT_WRITE("ck-step-1") "sleep 100",
                     NULL);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    proto_msg_release(&m);
    t0 = mu_time_wall_ms();
    assert_true(expect_msg(&f, PROTO_CHECKPOINT_DONE, &m, 3000));
    assert_string_equal(m.task.job, "1800-0");
    assert_int_equal(m.task.attempt, 2);
    assert_int_equal(m.task.task, 0);
    assert_string_equal(m.path, ck_path(&f, "ck-step-1", path, sizeof(path)));
    assert_true(m.at_ms + 2000 >= t0 && m.at_ms <= mu_time_wall_ms());
    (void)printf("# checkpoint reported %" PRIu64 " ms after the file's mtime\n",
                 mu_time_wall_ms() - m.at_ms);
    proto_msg_release(&m);
    send_simple(&f, PROTO_KILL, "1800-0", 0, 2, SIGKILL, 0, 5);
    n = until_exit(&f, "1800-0", paths, 8, &m);
    assert_int_equal(n, 0);
    proto_msg_release(&m);

    /* Same path twice is one report; a new path is another; the last one, written just
     * before the exit, arrives before TASK_STATUS. */
    send_bind_resume(&f, "1801-0",
                     CKPT_WRITE("ck-a") "sleep 0.3; " CKPT_WRITE("ck-a") "sleep 0.3; " CKPT_WRITE(
                         "ck-b") "sleep 0.3; " CKPT_WRITE("ck-final") "exit 0",
                     NULL);
    n = until_exit(&f, "1801-0", paths, 8, &m);
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    assert_int_equal(n, 3);
    assert_string_equal(paths[0], ck_path(&f, "ck-a", path, sizeof(path)));
    assert_string_equal(paths[1], ck_path(&f, "ck-b", path, sizeof(path)));
    assert_string_equal(paths[2], ck_path(&f, "ck-final", path, sizeof(path)));

    /* Written the instant before exit (no time for the loop to see it first). */
    send_bind_resume(&f, "1802-0", CKPT_WRITE("ck-last-gasp") "exit 7", NULL);
    n = until_exit(&f, "1802-0", paths, 8, &m);
    assert_int_equal(m.task.exit_code, 7);
    proto_msg_release(&m);
    assert_int_equal(n, 1);
    assert_string_equal(paths[0], ck_path(&f, "ck-last-gasp", path, sizeof(path)));

    /* Garbage is ignored: binary, empty, huge, a FIFO; then a good one still gets through. */
    send_bind_resume(
        &f, "1803-0",
        "f=\"$MUSTER_CHECKPOINT_FILE\"; "
        "printf '/ckpt/x\\000\\001' > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; sleep 0.2; "
        ": > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; sleep 0.2; "
        "head -c 100000 /dev/zero | tr '\\000' a > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; "
        "sleep 0.2; "
        "printf '\\n\\n' > \"$f\"; sleep 0.2; " CKPT_WRITE(
            "ck-good") "sleep 0.2; rm -f \"$f\"; mkfifo \"$f\"; exit 0",
        NULL);
    n = until_exit(&f, "1803-0", paths, 8, &m);
    proto_msg_release(&m);
    assert_int_equal(n, 1);
    assert_string_equal(paths[0], ck_path(&f, "ck-good", path, sizeof(path)));

    /* A path that does not exist here is not reported (nor resumed from); the task's .err log
     * says why.  Then a real one still is. */
    send_bind_resume(&f, "1806-0",
                     "printf '/nonexistent/ck\\n' > \"$MUSTER_CHECKPOINT_FILE.tmp\" && mv "
                     "\"$MUSTER_CHECKPOINT_FILE.tmp\" \"$MUSTER_CHECKPOINT_FILE\"; "
                     "sleep 0.3; " CKPT_WRITE("ck-real") "exit 0",
                     NULL);
    n = until_exit(&f, "1806-0", paths, 8, &m);
    proto_msg_release(&m);
    assert_int_equal(n, 1);
    assert_string_equal(paths[0], ck_path(&f, "ck-real", path, sizeof(path)));
    assert_true(
        wait_log(&f, "1806-0.2.0.err",
                 "muster-worker: the checkpoint path '/nonexistent/ck' this task reported "
                 "does not exist on node n1: it is not used to resume; write the checkpoint "
                 "where the task can (a workdir on shared storage), then report it\n"));

    /* MUSTER_RESUME_FROM: the BIND's resume_from when given, else unset. */
    send_bind_resume(&f, "1804-0", "echo \"${MUSTER_RESUME_FROM-unset}\"", "s3://b/ckpt/step-9");
    (void)until_exit(&f, "1804-0", paths, 8, &m);
    proto_msg_release(&m);
    send_bind_resume(&f, "1805-0", "echo \"${MUSTER_RESUME_FROM-unset}\"", NULL);
    (void)until_exit(&f, "1805-0", paths, 8, &m);
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/1804-0.2.0.out", f.dir), 0);
    text = mu_file_read(path, 4096, NULL, NULL);
    assert_non_null(text);
    assert_string_equal(text, "s3://b/ckpt/step-9\n");
    free(text);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/1805-0.2.0.out", f.dir), 0);
    text = mu_file_read(path, 4096, NULL, NULL);
    assert_non_null(text);
    assert_string_equal(text, "unset\n");
    free(text);
    fake_sched_stop(&f);
    assert_int_equal(unsetenv("MUSTER_RESUME_FROM"), 0);
}

static void test_agent_spot(void **state)
{
    struct mock_imds mk;
    struct fake_sched f;
    struct proto_msg m;
    uint64_t want;
    uint64_t posted;
    (void)state;

    memset(&m, 0, sizeof(m));
    if (!mock_start(&mk, NULL, 0))
        skip();
    fake_imds_url = mk.url;
    fake_sched_start(&f);
    fake_imds_url = NULL;
    /* The zone comes from the metadata service when no --label gives it. */
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    assert_int_equal(m.nlabels, 3);
    assert_string_equal(m.labels[2].level, "zone");
    assert_string_equal(m.labels[2].value, "us-east-1a");
    proto_msg_release(&m);
    send_simple(&f, PROTO_HEARTBEAT, "", 0, 0, 1, 0, 5);

    posted = mu_time_wall_ms();
    want = mock_notice(&mk, "{\"action\":\"terminate\",\"in_s\":120}");
    assert_true(expect_msg(&f, PROTO_SPOT_NOTICE, &m, 3000));
    (void)printf("# SPOT_NOTICE %" PRIu64 " ms after the notice started (--imds-interval-s 1)\n",
                 mu_time_wall_ms() - posted);
    assert_string_equal(m.action, "terminate");
    assert_int_equal(m.deadline_ms, want);
    assert_true(m.deadline_ms >= posted + 119000 && m.deadline_ms <= posted + 121000);
    proto_msg_release(&m);

    posted = mu_time_wall_ms();
    mock_post(&mk, "/mock/rebalance", "");
    assert_true(expect_msg(&f, PROTO_REBALANCE, &m, 3000));
    (void)printf("# REBALANCE %" PRIu64 " ms after the recommendation\n",
                 mu_time_wall_ms() - posted);
    assert_string_equal(m.action, "rebalance");
    assert_true(m.deadline_ms + 1000 >= posted && m.deadline_ms <= mu_time_wall_ms());
    proto_msg_release(&m);

    /* A scheduler that asks who we are hears the notices again after the HELLO. */
    send_simple(&f, PROTO_HEARTBEAT, "", 0, 0, 0, 0, 5);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 3000));
    proto_msg_release(&m);
    assert_true(expect_msg(&f, PROTO_SPOT_NOTICE, &m, 1000));
    assert_int_equal(m.deadline_ms, want);
    proto_msg_release(&m);
    fake_sched_stop(&f);
    mock_stop(&mk);
}

/* ---- identities ---- */

static void send_bind_user(struct fake_sched *f,
                           const char *job,
                           const char *script,
                           const char *job_user)
{
    const char *argv[] = { "/bin/sh", "-c", script };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.attempt = 1;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    if (job_user)
        mu_strlcpy(m.job_user, job_user, sizeof(m.job_user));
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

static void test_agent_identity(void **state)
{
    static const char *const allow[] = { "nobody" };
    struct fake_sched f;
    struct proto_msg m;
    struct passwd *pw;
    char want[64];
    (void)state;

    if (geteuid() != 0) {
        print_message("# skipped: needs root\n");
        return;
    }
    pw = getpwnam("nobody");
    if (!pw) {
        print_message("# skipped: no user 'nobody'\n");
        return;
    }
    fake_allow_users = allow;
    fake_nallow_users = 1;
    fake_sched_start(&f);
    fake_allow_users = NULL;
    fake_nallow_users = 0;
    assert_int_equal(chmod(f.dir, 0755), 0); /* the default workdir, reached as nobody */
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);

    /* Root without --run-as or --allow-root: refused. */
    send_bind_user(&f, "1930-0", "id -u", NULL);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_false(m.ok);
    assert_non_null(strstr(m.error, "refusing to run a task as root on node n1"));
    assert_true(m.node_fault);
    proto_msg_release(&m);
    /* A job user not on --allow-user: refused. */
    send_bind_user(&f, "1931-0", "id -u", "daemon");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_false(m.ok);
    assert_string_equal(m.error, "job user 'daemon' is not allowed on node n1; hint: start "
                                 "muster-worker with --allow-user daemon");
    assert_true(m.node_fault); /* another node may allow it: not counted against the job */
    proto_msg_release(&m);
    /* An allowed job user: the task runs with its ids and HOME/USER/LOGNAME. */
    send_bind_user(&f, "1932-0", "echo $(id -u) $(id -g) $USER $LOGNAME $HOME", "nobody");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    if (!m.ok)
        fail_msg("BIND refused: %s", m.error);
    proto_msg_release(&m);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(want, sizeof(want), "%d %d nobody nobody %s\n", (int)pw->pw_uid,
                                 (int)pw->pw_gid, pw->pw_dir),
                     0);
    assert_true(wait_log(&f, "1932-0.1.0.out", want));

    /* The task user can write its checkpoint file (ckpt/ is sticky and open to all)... */
    send_bind_user(&f, "1933-0",
                   "echo $MUSTER_CHECKPOINT_FILE > $MUSTER_CHECKPOINT_FILE.tmp && "
                   "mv $MUSTER_CHECKPOINT_FILE.tmp $MUSTER_CHECKPOINT_FILE",
                   "nobody");
    assert_true(expect_msg(&f, PROTO_CHECKPOINT_DONE, &m, 5000));
    {
        char file[1100];
        assert_int_equal(mu_snprintf(file, sizeof(file), "%s/ckpt/1933-0.1.0", f.dir), 0);
        assert_string_equal(m.path, file); /* a file that exists: the checkpoint file itself */
    }
    proto_msg_release(&m);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    proto_msg_release(&m);
    /* ...but a file someone else planted under its name is not its checkpoint. */
    {
        char path[1100];
        char id[PROTO_NODE_MAX];
        struct mu_err err;
        bool done = false;
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/ckpt/1934-0.1.0", f.dir), 0);
        write_file(path, "/ck/planted\n", 0644);
        send_bind_user(&f, "1934-0", "exit 0", "nobody");
        for (int i = 0; i < 500 && !done; i++) {
            assert_int_equal(wrk_agent_poll(f.agent, 10, &err), 1);
            while (!done && fake_recv(&f, id, sizeof(id), &m) == 1) {
                if (m.type == PROTO_CHECKPOINT_DONE)
                    fail_msg("planted checkpoint reported: %s", m.path);
                done = m.type == PROTO_TASK_STATUS;
                proto_msg_release(&m);
            }
        }
        assert_true(done);
    }
    fake_sched_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_protocol),
        cmocka_unit_test(test_agent_reregisters),
        cmocka_unit_test(test_agent_answer_every),
        cmocka_unit_test(test_agent_islands),
        cmocka_unit_test(test_agent_checkpoints),
        cmocka_unit_test_teardown(test_agent_spot, mock_teardown),
        cmocka_unit_test(test_agent_identity),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

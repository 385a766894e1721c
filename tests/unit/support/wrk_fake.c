/* SPDX-License-Identifier: MIT */
/*
 * The shared helpers of the worker's unit tests (wrk_fake.h has their contracts): temp files,
 * test data and stand-in nvidia-smi programs, the in-process scheduler that drives an agent, and
 * the metadata service stand-in.  One copy, linked into every test_wrk* executable.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <zmq.h>

#include "tests/unit/support/wrk_fake.h"

#include "common/mu_banned.h"

/* ---- files and processes ---- */

void data_path(const char *name, char *buf, size_t size)
{
    const char *dir = getenv("MUSTER_TEST_DATA");
    if (dir && dir[0]) {
        assert_int_equal(mu_snprintf(buf, size, "%s/wrk/%s", dir, name), 0);
        return;
    }
    /* Run by hand from the build tree: the data lies next to this source file's folder. */
    char here[1024];
    mu_strlcpy(here, __FILE__, sizeof(here));
    char *slash = strstr(here, "/unit/support/wrk_fake.c");
    assert_non_null(slash);
    *slash = '\0';
    assert_int_equal(mu_snprintf(buf, size, "%s/data/wrk/%s", here, name), 0);
}

char *read_data(const char *name)
{
    char path[1024];
    struct mu_err err;
    char *text;
    data_path(name, path, sizeof(path));
    text = mu_file_read(path, 1u << 20, NULL, &err);
    if (!text)
        fail_msg("%s", err.msg);
    return text;
}

char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/muster-test-wrk-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return strdup(dir);
}

void rm_rf(const char *dir)
{
    /* Test-owned temporary directory only; the path comes from mkdtemp above. */
    char *argv[] = { (char *)"rm", (char *)"-rf", (char *)dir, NULL };
    char *out = NULL;
    char *errout = NULL;
    int status;
    if (strncmp(dir, "/tmp/muster-test-wrk-", 21) != 0)
        return;
    if (wrk_spawn_capture(argv, 4096, 10000, &out, &errout, &status, NULL) == 0) {
        free(out);
        free(errout);
    }
}

void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* The text of <dir>/<name> (a heap string), or NULL. */
char *read_in(const char *dir, const char *name)
{
    char path[1100];
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/%s", dir, name), 0);
    return mu_file_read(path, 1 << 16, NULL, NULL);
}

bool file_exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/%s", dir, name), 0);
    return stat(path, &st) == 0;
}

int wait_exit(pid_t pid, int *status)
{
    pid_t r;
    do {
        r = waitpid(pid, status, 0);
    } while (r < 0 && errno == EINTR);
    return r == pid ? 0 : -1;
}

void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/*
 * Writes a stand-in nvidia-smi at dir/name that prints the CSV sample csv_file (piped through
 * csv_filter, e.g. "tac") for the GPU query, and runs topo_cmd (shell) for `topo -m`.
 */
void write_nvsmi(char *prog,
                 size_t size,
                 const char *dir,
                 const char *name,
                 const char *csv_file,
                 const char *csv_filter,
                 const char *topo_cmd)
{
    char csv[1024];
    char script[4096];

    data_path(csv_file, csv, sizeof(csv));
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "#!/bin/sh\n"
                                 "case \"$1\" in\n"
                                 "--query-gpu=index,uuid,name,memory.total,pci.bus_id)\n"
                                 "  [ \"$2\" = --format=csv,noheader,nounits ] || exit 8\n"
                                 "  cat '%s' | %s ;;\n"
                                 "topo)\n"
                                 "  [ \"$2\" = -m ] && [ $# -eq 2 ] || exit 8\n"
                                 "  %s ;;\n"
                                 "*) exit 7 ;;\n"
                                 "esac\n",
                                 csv, csv_filter, topo_cmd),
                     0);
    assert_int_equal(mu_snprintf(prog, size, "%s/%s", dir, name), 0);
    write_file(prog, script, 0755);
}

/* "cat 'DATA/wrk/<file>'" into buf. */
void cat_data(char *buf, size_t size, const char *file)
{
    char path[1024];
    data_path(file, path, sizeof(path));
    assert_int_equal(mu_snprintf(buf, size, "cat '%s'", path), 0);
}

/* ---- the agent against an in-process scheduler ---- */

/* When set, the next agent watches this metadata service every second and has no zone label. */
const char *fake_imds_url;

/* When set, the next agent is a root worker without --allow-root that allows these users. */
const char *const *fake_allow_users;

int fake_nallow_users;

void send_to_worker(struct fake_sched *f, struct proto_msg *m, uint64_t epoch)
{
    struct mu_err err;
    m->seq = ++f->seq;
    m->epoch = epoch;
    if (proto_send(f->router, "n1", m, &err) != 0)
        fail_msg("%s", err.msg);
}

/*
 * proto_recv on the router, as the scheduler would: notes the echo_ms of each HELLO and
 * HEARTBEAT and, with answer_lease_s, answers it (ok, the echo carried back, the lease).
 */
int fake_recv(struct fake_sched *f, char *id, size_t id_size, struct proto_msg *out)
{
    struct mu_err err;
    int r = proto_recv(f->router, id, id_size, out, &err);

    if (r == 1 && (out->type == PROTO_HELLO || out->type == PROTO_HEARTBEAT)) {
        f->last_echo_ms = out->echo_ms;
        if (f->answer_lease_s > 0) {
            struct proto_msg hb;
            proto_msg_init(&hb, PROTO_HEARTBEAT);
            hb.ok = true;
            hb.heartbeat_s = 1;
            hb.lease_s = f->answer_lease_s;
            hb.echo_ms = out->echo_ms;
            send_to_worker(f, &hb, 5);
            proto_msg_release(&hb);
        }
    }
    return r;
}

/* Turns the agent's loop until the router has a message of `type` from it (others skipped). */
bool expect_msg(struct fake_sched *f, enum proto_type type, struct proto_msg *out, int timeout_ms)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)timeout_ms;
    struct mu_err err;
    char id[PROTO_NODE_MAX];

    while (mu_time_mono_ms() < deadline) {
        int r;
        assert_int_equal(wrk_agent_poll(f->agent, 10, &err), 1);
        while ((r = fake_recv(f, id, sizeof(id), out)) == 1) {
            assert_string_equal(id, "n1");
            if (out->type == type)
                return true;
            proto_msg_release(out);
        }
        proto_msg_release(out);
        assert_int_equal(r, 0);
    }
    return false;
}

/* Turns the agent's loop until the task's log file holds `want`. */
bool wait_log(struct fake_sched *f, const char *name, const char *want)
{
    char path[1024];
    struct mu_err err;
    bool found = false;

    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/%s", f->dir, name), 0);
    for (int i = 0; i < 500 && !found; i++) {
        char *text = mu_file_read(path, 4096, NULL, NULL);
        found = text && strcmp(text, want) == 0;
        free(text);
        if (!found)
            assert_int_equal(wrk_agent_poll(f->agent, 10, &err), 1);
    }
    return found;
}

/* Turns the agent's loop for ms, taking (and dropping) what it sends. */
void agent_turn(struct fake_sched *f, int ms)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)ms;
    struct mu_err err;
    char id[PROTO_NODE_MAX];

    while (mu_time_mono_ms() < deadline) {
        struct proto_msg m;
        assert_int_equal(wrk_agent_poll(f->agent, 10, &err), 1);
        while (fake_recv(f, id, sizeof(id), &m) == 1)
            proto_msg_release(&m);
        proto_msg_release(&m);
    }
}

/* The BIND_ACK for job's task (others skipped); fails the test when none comes. */
void expect_ack(struct fake_sched *f, const char *job, struct proto_msg *m)
{
    for (;;) {
        if (!expect_msg(f, PROTO_BIND_ACK, m, 5000))
            fail_msg("no BIND_ACK for %s", job);
        if (strcmp(m->task.job, job) == 0)
            return;
        proto_msg_release(m);
    }
}

/* Turns the loop until the task of job exits; returns the CHECKPOINT_DONE paths seen before. */
int until_exit(struct fake_sched *f,
               const char *job,
               char paths[][PROTO_PATH_MAX],
               int max,
               struct proto_msg *status)
{
    uint64_t deadline = mu_time_mono_ms() + 5000;
    struct mu_err err;
    char id[PROTO_NODE_MAX];
    int n = 0;

    while (mu_time_mono_ms() < deadline) {
        struct proto_msg m;
        assert_int_equal(wrk_agent_poll(f->agent, 10, &err), 1);
        while (fake_recv(f, id, sizeof(id), &m) == 1) {
            if (m.type == PROTO_CHECKPOINT_DONE && strcmp(m.task.job, job) == 0 && n < max)
                mu_strlcpy(paths[n++], m.path, PROTO_PATH_MAX);
            if (m.type == PROTO_TASK_STATUS && strcmp(m.task.job, job) == 0) {
                *status = m;
                return n;
            }
            proto_msg_release(&m);
        }
    }
    fail_msg("job %s did not exit", job);
    return -1;
}

void send_simple(struct fake_sched *f,
                 enum proto_type type,
                 const char *job,
                 int task,
                 int attempt,
                 int signal,
                 int grace_s,
                 uint64_t epoch)
{
    struct proto_msg m;
    proto_msg_init(&m, type);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.task = task;
    m.task.attempt = attempt;
    m.signal = signal;
    m.grace_s = grace_s;
    if (type == PROTO_HEARTBEAT) {
        /* An answer to the worker's latest HELLO or HEARTBEAT, as the scheduler sends. */
        m.ok = signal != 0;
        m.heartbeat_s = 1;
        m.echo_ms = f->last_echo_ms;
        m.lease_s = f->answer_lease_s;
    }
    send_to_worker(f, &m, epoch);
    proto_msg_release(&m);
}

void send_bind(
    struct fake_sched *f, const char *job, int task, const char *script, int gpu, uint64_t epoch)
{
    const char *argv[] = { "/bin/sh", "-c", script };
    const char *env[] = { "FROM_SPEC=yes" };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.task = task;
    m.task.attempt = 1;
    m.world_size = 2;
    m.local_rank = 0;
    m.local_world_size = 1;
    m.node_rank = task;
    m.nnodes = 2;
    mu_strlcpy(m.master_addr, "10.0.0.9", sizeof(m.master_addr));
    m.master_port = 29500;
    m.nbind_gpus = 1;
    m.bind_gpus[0] = gpu;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    assert_int_equal(proto_msg_set_env(&m, 1, env, &err), 0);
    send_to_worker(f, &m, epoch);
    proto_msg_release(&m);
}

/*
 * Starts an agent against a fresh ROUTER: sim_gpus simulated GPUs laid out by islands (an
 * --gpu-islands list, NULL = one island), or, with sim_gpus -1, GPUs discovered through the
 * stand-in nvidia_smi.  Labels zone, block and rack.
 */
void fake_sched_start_with(struct fake_sched *f,
                           int sim_gpus,
                           const char *islands,
                           const char *nvidia_smi)
{
    struct wrk_config cfg;
    struct mu_err err;
    char *endpoint;
    static const char *const labels[][2] = {
        { "zone", "us-east-1a" },
        { "block", "b-07" },
        { "rack", "r.12:3" },
    };

    memset(f, 0, sizeof(*f));
    f->dir = make_tmpdir();
    f->ctx = zmq_ctx_new();
    assert_non_null(f->ctx);
    endpoint = f->endpoint;
    assert_int_equal(mu_snprintf(endpoint, sizeof(f->endpoint), "ipc://%s/sched", f->dir), 0);
    f->router = proto_router_new(f->ctx, endpoint, &err);
    if (!f->router)
        fail_msg("%s", err.msg);

    memset(&cfg, 0, sizeof(cfg));
    cfg.scheduler = endpoint;
    cfg.node = "n1";
    cfg.pool = "p5-spot";
    cfg.state_dir = f->dir;
    cfg.addr = "10.0.0.9";
    cfg.instance_id = "i-0123456789abcdef0";
    cfg.sim_gpus = sim_gpus;
    cfg.nvidia_smi = nvidia_smi;
    if (islands && wrk_gpu_islands_parse(islands, sim_gpus, cfg.sim_island, &err) != 0)
        fail_msg("%s", err.msg);
    cfg.cpus = 4;
    cfg.memory_mb = 1000;
    cfg.heartbeat_s = 1;
    cfg.cgroup_root = ""; /* the host's cgroups are t4006-worker-cgroup's to use, not a unit's */
    cfg.allow_root = geteuid() == 0; /* a root test run is the operator who said so */
    if (fake_allow_users) {
        cfg.allow_root = false;
        cfg.allow_users = fake_allow_users;
        cfg.nallow_users = fake_nallow_users;
    }
    for (size_t i = fake_imds_url ? 1 : 0; i < MU_ARRAY_LEN(labels); i++) {
        struct proto_label *l = &cfg.labels[cfg.nlabels++];
        mu_strlcpy(l->level, labels[i][0], sizeof(l->level));
        mu_strlcpy(l->value, labels[i][1], sizeof(l->value));
    }
    if (fake_imds_url) {
        cfg.imds = fake_imds_url;
        cfg.imds_interval_s = 1;
    }
    f->cfg = cfg;
    f->agent = wrk_agent_new(&cfg, &err);
    if (!f->agent)
        fail_msg("%s", err.msg);
}

void fake_sched_start(struct fake_sched *f)
{
    fake_sched_start_with(f, 2, "1,1", NULL);
}

void fake_sched_stop(struct fake_sched *f)
{
    wrk_agent_free(f->agent);
    assert_int_equal(zmq_close(f->router), 0);
    assert_int_equal(zmq_ctx_term(f->ctx), 0);
    rm_rf(f->dir);
    free(f->dir);
}

/* ---- the metadata service stand-in (tests/imds/imds_mock.py) ---- */

/* The mock that runs now, so that a failed test's teardown can still stop it. */
static pid_t mock_live_pid;

/* Starts imds_mock.py with extra arguments; false (the caller skips) when python3 is missing. */
bool mock_start(struct mock_imds *mk, const char *const *extra, int nextra)
{
    char script[1024];
    char portfile[1024];
    char *argv[16];
    struct wrk_spawn sp;
    struct mu_err err;
    int n = 0;

    memset(mk, 0, sizeof(*mk));
    data_path("../../imds/imds_mock.py", script, sizeof(script));
    mk->dir = make_tmpdir();
    assert_int_equal(mu_snprintf(portfile, sizeof(portfile), "%s/port", mk->dir), 0);
    argv[n++] = (char *)"python3";
    argv[n++] = script;
    argv[n++] = (char *)"--port-file";
    argv[n++] = portfile;
    for (int i = 0; i < nextra && n < 14; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    memset(&sp, 0, sizeof(sp));
    sp.argv = argv;
    sp.fd_stdin = -1;
    sp.fd_stdout = -1;
    sp.fd_stderr = 2;
    sp.new_pgrp = true;
    if (wrk_spawn_start(&sp, &mk->pid, NULL, &err) != 0) {
        rm_rf(mk->dir);
        free(mk->dir);
        return false;
    }
    for (int i = 0; i < 500 && mk->port == 0; i++) {
        char *text = mu_file_read(portfile, 64, NULL, NULL);
        int64_t v;
        if (text) {
            char *nl = strchr(text, '\n');
            if (nl)
                *nl = '\0';
            if (mu_parse_i64(text, 1, 65535, &v, NULL) == 0)
                mk->port = (int)v;
        }
        free(text);
        if (mk->port == 0)
            sleep_ms(10);
    }
    mock_live_pid = mk->pid;
    if (mk->port == 0)
        fail_msg("imds_mock.py did not write its port");
    (void)mu_snprintf(mk->url, sizeof(mk->url), "http://127.0.0.1:%d", mk->port);
    return true;
}

void mock_stop(struct mock_imds *mk)
{
    int status;
    mock_live_pid = 0;
    assert_int_equal(kill(mk->pid, SIGTERM), 0);
    assert_int_equal(wait_exit(mk->pid, &status), 0);
    rm_rf(mk->dir);
    free(mk->dir);
}

int mock_teardown(void **state)
{
    int status;
    (void)state;
    fake_imds_url = NULL;
    if (mock_live_pid > 0) {
        (void)kill(mock_live_pid, SIGKILL);
        (void)wait_exit(mock_live_pid, &status);
        mock_live_pid = 0;
    }
    return 0;
}

static size_t mock_body(char *data, size_t size, size_t nmemb, void *userp)
{
    struct mu_buf *b = userp;
    return mu_buf_append(b, data, size * nmemb, NULL) == 0 ? size * nmemb : 0;
}

/* POSTs body to the mock's control path (or GETs when body is NULL); returns the reply. */
char *mock_call(const struct mock_imds *mk, const char *path, const char *body)
{
    char url[256];
    struct mu_buf b;
    CURL *c = curl_easy_init();
    long code = 0;

    assert_non_null(c);
    mu_buf_init(&b, 1u << 16);
    assert_int_equal(mu_snprintf(url, sizeof(url), "%s%s", mk->url, path), 0);
    (void)curl_easy_setopt(c, CURLOPT_URL, url);
    (void)curl_easy_setopt(c, CURLOPT_PROXY, "");
    (void)curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mock_body);
    (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (body)
        (void)curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    assert_int_equal(code, 200);
    curl_easy_cleanup(c);
    return mu_buf_take(&b);
}

void mock_post(const struct mock_imds *mk, const char *path, const char *body)
{
    free(mock_call(mk, path, body));
}

/* The integer after "key": in the mock's /mock/stats. */
int64_t mock_stat(const struct mock_imds *mk, const char *key)
{
    char *text = mock_call(mk, "/mock/stats", NULL);
    char pat[64];
    const char *p;
    int64_t v = -1;
    (void)mu_snprintf(pat, sizeof(pat), "\"%s\": ", key);
    p = strstr(text, pat);
    if (p) {
        char num[32];
        size_t n = 0;
        p += strlen(pat);
        while (n < sizeof(num) - 1 && p[n] >= '0' && p[n] <= '9') {
            num[n] = p[n];
            n++;
        }
        num[n] = '\0';
        (void)mu_parse_i64(num, 0, INT64_MAX, &v, NULL);
    }
    free(text);
    return v;
}

/* The time in the mock's reply to /mock/notice, as wall ms. */
uint64_t mock_notice(const struct mock_imds *mk, const char *body)
{
    char *reply = mock_call(mk, "/mock/notice", body);
    const char *t = strstr(reply, "\"time\": \"");
    uint64_t want = 0;
    struct mu_err err;
    char text[32];
    assert_non_null(t);
    mu_strlcpy(text, t + 9, 21);
    assert_int_equal(wrk_imds_parse_time(text, &want, &err), 0);
    free(reply);
    return want;
}

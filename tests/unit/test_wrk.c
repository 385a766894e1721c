/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the worker (worker/wrk.h): the nvidia-smi CSV parser on captured samples of
 * four EC2 GPU instance types and a bad-input table, the `nvidia-smi topo -m` matrix parser on
 * NVSwitch, hybrid-cube-mesh, NVLink-pair and PCIe-only boxes with its own bad-input table, the
 * --gpu-islands list, GPU and island discovery through stand-in scripts, the task environment
 * builder (pure, no fork), and the launcher for real: a task's log file and exit code, KILL of a
 * whole process group, and exec failures turned into messages.  The agent is driven against an
 * in-process ROUTER standing in for the scheduler, including the islands and labels of HELLO.
 * Issue 4: the checkpoint file parser and reader, checkpoints reported by real tasks (temp file
 * and rename, just before exit, garbage, MUSTER_RESUME_FROM), the IMDS JSON parsers, and the
 * spot watcher and the agent against tests/imds/imds_mock.py started as a subprocess (token
 * renewal before expiry and on 401, notices, rebalance, garbage, a stalled and a dead service).
 * Issue 5: task records and exit files (round trips, bad-input tables, hostile files), the
 * shim's spec and its /proc check, and the agent re-adopting, reporting and forgetting tasks
 * across a restart, fencing itself when the lease runs out, and refusing or switching users.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <zmq.h>

#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- helpers ---- */

static void data_path(const char *name, char *buf, size_t size)
{
    const char *dir = getenv("MUSTER_TEST_DATA");
    if (dir && dir[0]) {
        assert_int_equal(mu_snprintf(buf, size, "%s/wrk/%s", dir, name), 0);
        return;
    }
    /* Run by hand from the build tree: the data lies next to this source file's folder. */
    char here[1024];
    mu_strlcpy(here, __FILE__, sizeof(here));
    char *slash = strstr(here, "/unit/test_wrk.c");
    assert_non_null(slash);
    *slash = '\0';
    assert_int_equal(mu_snprintf(buf, size, "%s/data/wrk/%s", here, name), 0);
}

static char *read_data(const char *name)
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

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/muster-test-wrk-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return strdup(dir);
}

static void rm_rf(const char *dir)
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

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static int wait_exit(pid_t pid, int *status)
{
    pid_t r;
    do {
        r = waitpid(pid, status, 0);
    } while (r < 0 && errno == EINTR);
    return r == pid ? 0 : -1;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- nvidia-smi CSV ---- */

struct sample {
    const char *file;
    int n;
    const char *model;
    int64_t memory_mb;
    const char *bus[8];
};

static const struct sample samples[] = {
    { "p5.48xlarge.csv",
      8,
      "NVIDIA H100 80GB HBM3",
      81559,
      { "00000000:53:00.0", "00000000:64:00.0", "00000000:75:00.0", "00000000:86:00.0",
        "00000000:97:00.0", "00000000:A8:00.0", "00000000:B9:00.0", "00000000:CA:00.0" } },
    { "p4d.24xlarge.csv",
      8,
      "NVIDIA A100-SXM4-40GB",
      40960,
      { "00000000:10:1C.0", "00000000:10:1D.0", "00000000:20:1C.0", "00000000:20:1D.0",
        "00000000:90:1C.0", "00000000:90:1D.0", "00000000:A0:1C.0", "00000000:A0:1D.0" } },
    { "g6e.12xlarge.csv",
      4,
      "NVIDIA L40S",
      46068,
      { "00000000:38:00.0", "00000000:3A:00.0", "00000000:3C:00.0", "00000000:3E:00.0" } },
    { "g5.xlarge.csv", 1, "NVIDIA A10G", 23028, { "00000000:00:1E.0" } },
};

static void check_sample(const struct sample *s)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char *text = read_data(s->file);
    int n = -1;
    char *line = text;

    if (wrk_gpus_parse_csv(text, gpus, PROTO_MAX_GPUS, &n, &err) != 0)
        fail_msg("%s: %s", s->file, err.msg);
    assert_int_equal(n, s->n);
    for (int i = 0; i < n; i++) {
        /* The UUID is the second field of line i, as written in the file. */
        char uuid[64];
        const char *u = strstr(line, "GPU-");
        assert_non_null(u);
        size_t ulen = strcspn(u, ",");
        assert_true(ulen < sizeof(uuid));
        memcpy(uuid, u, ulen);
        uuid[ulen] = '\0';
        line = strchr(line, '\n') + 1;

        assert_int_equal(gpus[i].index, i);
        assert_string_equal(gpus[i].uuid, uuid);
        assert_int_equal(strlen(gpus[i].uuid), 40);
        assert_string_equal(gpus[i].model, s->model);
        assert_int_equal(gpus[i].memory_mb, s->memory_mb);
        assert_string_equal(gpus[i].pci_bus_id, s->bus[i]);
        assert_int_equal(gpus[i].island, 0);
    }
    free(text);
}

static void test_csv_samples(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(samples); i++)
        check_sample(&samples[i]);
}

static void test_csv_inline(void **state)
{
    struct proto_gpu gpus[4];
    struct mu_err err;
    int n = -1;
    (void)state;

    /* The line from the design notes, with CRLF, a blank line and a comma in a model name. */
    const char *text = "0, GPU-6b6b4b9e-3c2d-1f00-8a8a-1234567890ab, NVIDIA H100 80GB HBM3, 81559, "
                       "00000000:18:00.0\r\n"
                       "\n"
                       "  3 ,GPU-aa,Odd, Model, Name ,1024,0000:01:00.0\n";
    assert_int_equal(wrk_gpus_parse_csv(text, gpus, 4, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(gpus[0].index, 0);
    assert_string_equal(gpus[0].uuid, "GPU-6b6b4b9e-3c2d-1f00-8a8a-1234567890ab");
    assert_string_equal(gpus[0].model, "NVIDIA H100 80GB HBM3");
    assert_int_equal(gpus[0].memory_mb, 81559);
    assert_string_equal(gpus[0].pci_bus_id, "00000000:18:00.0");
    assert_int_equal(gpus[1].index, 3);
    assert_string_equal(gpus[1].uuid, "GPU-aa");
    assert_string_equal(gpus[1].model, "Odd, Model, Name");
    assert_int_equal(gpus[1].memory_mb, 1024);
    assert_string_equal(gpus[1].pci_bus_id, "0000:01:00.0");
}

struct bad_case {
    const char *text; /* inline text, or NULL to read file */
    const char *file;
    int code;
    const char *msg; /* expected substring */
};

static const struct bad_case bad_cases[] = {
    { NULL, "bad-na-memory.csv", MU_E_PARSE, "line 1: memory.total: expected MiB, got '[N/A]'" },
    { NULL, "bad-missing-columns.csv", MU_E_PARSE,
      "line 1: expected 5 comma-separated fields (index, uuid, name, memory.total, pci.bus_id), "
      "got 3" },
    { NULL, "bad-garbage.csv", MU_E_PARSE, "line 1: expected 5 comma-separated fields" },
    { NULL, "bad-empty.csv", MU_E_NOTFOUND, "nvidia-smi reported no GPUs" },
    { "\n\n  \n", NULL, MU_E_NOTFOUND, "no GPUs" },
    { "x, GPU-a, A, 1, 0:0.0\n", NULL, MU_E_PARSE, "line 1: index: expected 0..63, got 'x'" },
    { "64, GPU-a, A, 1, 0:0.0\n", NULL, MU_E_PARSE, "index: expected 0..63, got '64'" },
    { "-1, GPU-a, A, 1, 0:0.0\n", NULL, MU_E_PARSE, "index" },
    { "0, , A, 1, 0:0.0\n", NULL, MU_E_PARSE, "line 1: uuid: expected a GPU UUID, got ''" },
    { "0, GPU a, A, 1, 0:0.0\n", NULL, MU_E_PARSE, "uuid" },
    { "0, GPU-a, , 1, 0:0.0\n", NULL, MU_E_PARSE, "line 1: name: expected a GPU model" },
    { "0, GPU-a, [N/A], 1, 0:0.0\n", NULL, MU_E_PARSE, "name" },
    { "0, GPU-a, A, 0, 0:0.0\n", NULL, MU_E_PARSE, "memory.total: expected MiB, got '0'" },
    { "0, GPU-a, A, 12.5, 0:0.0\n", NULL, MU_E_PARSE, "memory.total" },
    { "0, GPU-a, A, 1 MiB, 0:0.0\n", NULL, MU_E_PARSE, "memory.total" },
    { "0, GPU-a, A, 1, \n", NULL, MU_E_PARSE, "line 1: pci.bus_id: expected a PCI bus id, got ''" },
    { "0, GPU-a, A, 1, [N/A]\n", NULL, MU_E_PARSE, "pci.bus_id" },
    { "0, GPU-a, A, 1, 0:0.0\n0, GPU-b, B, 1, 0:1.0\n", NULL, MU_E_PARSE,
      "line 2: index 0 appears twice" },
    { "0, GPU-a, A, 1, 0:0.0\ngarbage\n", NULL, MU_E_PARSE, "line 2: expected 5" },
    { "0,GPU-a,A,1\n", NULL, MU_E_PARSE, "got 4" },
};

static void test_csv_bad(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(bad_cases); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct proto_gpu gpus[4];
        struct mu_err err;
        char *text = c->text ? strdup(c->text) : read_data(c->file);
        int n = 42;
        mu_err_clear(&err);
        if (wrk_gpus_parse_csv(text, gpus, 4, &n, &err) != -1)
            fail_msg("case %zu (%s): parsed", i, c->file ? c->file : c->text);
        if (err.code != c->code || !strstr(err.msg, c->msg))
            fail_msg("case %zu: got %s '%s', want %s '%s'", i, mu_err_name(err.code), err.msg,
                     mu_err_name(c->code), c->msg);
        assert_int_equal(n, 42);
        free(text);
    }
}

static void test_csv_too_many(void **state)
{
    struct proto_gpu gpus[2];
    struct mu_err err;
    int n = -1;
    char *text = read_data("g6e.12xlarge.csv");
    (void)state;
    assert_int_equal(wrk_gpus_parse_csv(text, gpus, 2, &n, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_string_equal(err.msg, "line 3: more than 2 GPUs");
    free(text);

    char longline[2048];
    memset(longline, 'a', sizeof(longline) - 1);
    longline[sizeof(longline) - 1] = '\0';
    assert_int_equal(wrk_gpus_parse_csv(longline, gpus, 2, &n, &err), -1);
    assert_non_null(strstr(err.msg, "line 1: longer than"));
}

/* ---- nvidia-smi topo -m: NVLink islands ---- */

struct topo_sample {
    const char *file; /* in tests/data/wrk, or NULL for text */
    const char *text;
    int ngpus;
    int nislands;
    int island[8];
};

static const struct topo_sample topo_samples[] = {
    /* NVSwitch boxes: every pair NV18 (H100) or NV12 (A100), NIC rows, Legend, NIC Legend. */
    { "topo-p5.48xlarge.txt", NULL, 8, 1, { 0, 0, 0, 0, 0, 0, 0, 0 } },
    { "topo-p4d.24xlarge.txt", NULL, 8, 1, { 0, 0, 0, 0, 0, 0, 0, 0 } },
    /* Hybrid cube mesh: GPU0-GPU5 is SYS, but they reach each other over NVLink via peers. */
    { "topo-p3.16xlarge.txt", NULL, 8, 1, { 0, 0, 0, 0, 0, 0, 0, 0 } },
    /* PCIe only (NODE, PHB, SYS): one island per GPU. */
    { "topo-g6e.12xlarge.txt", NULL, 4, 4, { 0, 1, 2, 3 } },
    { "topo-g5.12xlarge-ansi.txt", NULL, 4, 4, { 0, 1, 2, 3 } },
    { "topo-g5.xlarge.txt", NULL, 1, 1, { 0 } },
    /* Two NVLink-bridged pairs. */
    { "topo-nvlink-pairs.txt", NULL, 4, 2, { 0, 0, 1, 1 } },
    /* Pasted with spaces instead of tabs, no trailing columns, no final newline. */
    { NULL,
      "        GPU0    GPU1    GPU2\n"
      "GPU0     X      PIX     NV2\n"
      "GPU1    PIX      X      SOC\n"
      "GPU2    NV2     SOC      X ",
      3,
      2,
      { 0, 1, 0 } },
    /* Islands numbered by their lowest GPU; CRLF line ends; a chain is one island. */
    { NULL,
      "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tCPU Affinity\r\n"
      "GPU0\t X \tSYS\tSYS\tNV1\tSYS\t0-7\r\n"
      "GPU1\tSYS\t X \tNV6\tSYS\tSYS\t0-7\r\n"
      "GPU2\tSYS\tNV6\t X \tSYS\tNV12\t0-7\r\n"
      "GPU3\tNV1\tSYS\tSYS\t X \tSYS\t0-7\r\n"
      "GPU4\tSYS\tSYS\tNV12\tSYS\t X \t0-7\r\n",
      5,
      2,
      { 0, 1, 1, 0, 1 } },
    /* Blank lines before the header; a Legend line right after the rows ends the matrix. */
    { NULL,
      "\n\n\tGPU0\tGPU1\nGPU1\tNV4\t X \nGPU0\t X \tNV4\nLegend:\nGPU7 junk\n",
      2,
      1,
      { 0, 0 } },
};

static void test_topo_samples(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(topo_samples); i++) {
        const struct topo_sample *s = &topo_samples[i];
        char *text = s->file ? read_data(s->file) : strdup(s->text);
        int island[PROTO_MAX_GPUS];
        int nislands = -1;
        struct mu_err err;

        memset(island, 0x55, sizeof(island));
        if (wrk_topo_parse(text, s->ngpus, island, &nislands, &err) != 0)
            fail_msg("case %zu (%s): %s", i, s->file ? s->file : "inline", err.msg);
        if (nislands != s->nislands)
            fail_msg("case %zu (%s): %d islands, want %d", i, s->file ? s->file : "inline",
                     nislands, s->nislands);
        for (int g = 0; g < s->ngpus; g++) {
            if (island[g] != s->island[g])
                fail_msg("case %zu (%s): GPU%d in island %d, want %d", i,
                         s->file ? s->file : "inline", g, island[g], s->island[g]);
        }
        assert_int_equal(island[s->ngpus], 0x55555555); /* nothing past ngpus */
        /* nislands_out is optional. */
        assert_int_equal(wrk_topo_parse(text, s->ngpus, island, NULL, &err), 0);
        free(text);
    }
}

struct topo_bad {
    const char *file; /* in tests/data/wrk, or NULL for text */
    const char *text;
    int ngpus;
    int code;
    const char *msg; /* expected substring */
};

#define PAIR_HDR "\tGPU0\tGPU1\tCPU Affinity\n"

static const struct topo_bad topo_bad_cases[] = {
    { "topo-bad-missing-row.txt", NULL, 4, MU_E_PARSE, "row 'GPU2' is missing" },
    { "topo-bad-short-row.txt", NULL, 4, MU_E_PARSE,
      "line 3: row GPU1 has 2 GPU cells, expected 4" },
    { "topo-bad-link.txt", NULL, 4, MU_E_PARSE,
      "line 3: GPU1-GPU2: expected X, NV#, PIX, PXB, PHB, NODE or SYS, got 'QPI'" },
    { "topo-bad-asymmetric.txt", NULL, 4, MU_E_PARSE,
      "GPU0-GPU3: NVLink one way but not the other" },
    { "topo-bad-garbage.txt", NULL, 4, MU_E_PARSE,
      "line 1: expected the header row of 'nvidia-smi topo -m' (GPU0 GPU1 ...), got 'NVIDIA-SMI'" },
    { "topo-bad-legend-only.txt", NULL, 4, MU_E_PARSE,
      "line 2: expected the header row of 'nvidia-smi topo -m' (GPU0 GPU1 ...), got 'Legend:'" },
    { "topo-bad-empty.txt", NULL, 4, MU_E_PARSE, "no GPU matrix" },
    /* The matrix and --query-gpu disagree on the GPU count. */
    { "topo-p5.48xlarge.txt", NULL, 4, MU_E_PARSE, "line 1: the matrix has 8 GPUs, expected 4" },
    { "topo-g6e.12xlarge.txt", NULL, 8, MU_E_PARSE, "line 1: the matrix has 4 GPUs, expected 8" },
    { "topo-g5.xlarge.txt", NULL, 2, MU_E_PARSE, "the matrix has 1 GPU, expected 2" },
    { NULL, "\n \t\r\n", 2, MU_E_PARSE, "no GPU matrix" },
    { NULL, PAIR_HDR, 2, MU_E_PARSE, "row 'GPU0' is missing" },
    { NULL, PAIR_HDR "\n", 2, MU_E_PARSE, "row 'GPU0' is missing" },
    { NULL, PAIR_HDR "GPU0\t X \tNV4\nGPU0\t X \tNV4\n", 2, MU_E_PARSE,
      "line 3: row 'GPU0' appears twice" },
    { NULL, PAIR_HDR "GPU2\t X \tNV4\n", 2, MU_E_PARSE,
      "line 2: row 'GPU2' is not in the header (GPU0..GPU1)" },
    { NULL, PAIR_HDR "GPU0\tNV4\t X \nGPU1\t X \tNV4\n", 2, MU_E_PARSE,
      "line 2: GPU0-GPU0: expected X, got 'NV4'" },
    { NULL, PAIR_HDR "GPU0\t X \t X \n", 2, MU_E_PARSE, "line 2: GPU0-GPU1: X off the diagonal" },
    { NULL, PAIR_HDR "GPU0\t X \tNV0\n", 2, MU_E_PARSE, "got 'NV0'" },
    { NULL, PAIR_HDR "GPU0\t X \tNV\n", 2, MU_E_PARSE, "got 'NV'" },
    { NULL, PAIR_HDR "GPU0\t X \tNV1000\n", 2, MU_E_PARSE, "got 'NV1000'" },
    { NULL, PAIR_HDR "GPU0\t X \tnv4\n", 2, MU_E_PARSE, "got 'nv4'" },
    { NULL, PAIR_HDR "GPU0\t X \t0-7\n", 2, MU_E_PARSE, "GPU0-GPU1: expected X, NV#" },
    { NULL, PAIR_HDR "GPU0\t X \n", 2, MU_E_PARSE, "line 2: row GPU0 has 1 GPU cells, expected 2" },
    { NULL, PAIR_HDR "CPU0\t X \tNV4\n", 2, MU_E_PARSE,
      "line 2: expected a GPU or NIC row, got 'CPU0'" },
    { NULL, PAIR_HDR "GPU00\t X \tNV4\n", 2, MU_E_PARSE, "expected a GPU or NIC row, got 'GPU00'" },
    { NULL, "\tGPU0\tGPU2\n", 2, MU_E_PARSE, "line 1: column 'GPU2' where GPU1 was expected" },
    { NULL, "\tGPU1\tGPU0\n", 2, MU_E_PARSE, "line 1: expected the header row" },
    { NULL, "GPU0\t X \tNV4\nGPU1\tNV4\t X \n", 2, MU_E_PARSE,
      "line 1: the matrix has 1 GPU, expected 2" },
    { NULL, PAIR_HDR "GPU0\t X \tSYS\nGPU1\tNV4\t X \n", 2, MU_E_PARSE,
      "GPU0-GPU1: NVLink one way but not the other" },
    { NULL, PAIR_HDR, 0, MU_E_INVAL, "0 GPUs: expected 1..64" },
    { NULL, PAIR_HDR, 65, MU_E_INVAL, "65 GPUs: expected 1..64" },
};

static void test_topo_bad(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(topo_bad_cases); i++) {
        const struct topo_bad *c = &topo_bad_cases[i];
        char *text = c->file ? read_data(c->file) : strdup(c->text);
        int island[PROTO_MAX_GPUS];
        int nislands = 42;
        struct mu_err err;

        memset(island, 0x55, sizeof(island));
        mu_err_clear(&err);
        if (wrk_topo_parse(text, c->ngpus, island, &nislands, &err) != -1)
            fail_msg("case %zu (%s): parsed", i, c->file ? c->file : c->text);
        if (err.code != c->code || !strstr(err.msg, c->msg))
            fail_msg("case %zu: got %s '%s', want %s '%s'", i, mu_err_name(err.code), err.msg,
                     mu_err_name(c->code), c->msg);
        /* A failed parse has no side effects. */
        assert_int_equal(nislands, 42);
        for (int g = 0; g < PROTO_MAX_GPUS; g++)
            assert_int_equal(island[g], 0x55555555);
        free(text);
    }
}

static void test_topo_limits(void **state)
{
    struct mu_err err;
    struct mu_buf b;
    int island[PROTO_MAX_GPUS];
    int nislands = -1;
    (void)state;

    assert_int_equal(wrk_topo_parse(NULL, 2, island, &nislands, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);

    /* 64 GPUs, NVLink in pairs (2k, 2k+1): 32 islands. */
    mu_buf_init(&b, 0);
    for (int j = 0; j < PROTO_MAX_GPUS; j++)
        assert_int_equal(mu_buf_appendf(&b, &err, "\tGPU%d", j), 0);
    assert_int_equal(mu_buf_append(&b, "\n", 1, &err), 0);
    for (int i = 0; i < PROTO_MAX_GPUS; i++) {
        assert_int_equal(mu_buf_appendf(&b, &err, "GPU%d", i), 0);
        for (int j = 0; j < PROTO_MAX_GPUS; j++)
            assert_int_equal(mu_buf_appendf(&b, &err, "\t%s",
                                            i == j           ? " X "
                                            : i / 2 == j / 2 ? "NV4"
                                                             : "SYS"),
                             0);
        assert_int_equal(mu_buf_append(&b, "\n", 1, &err), 0);
    }
    if (wrk_topo_parse(b.data, PROTO_MAX_GPUS, island, &nislands, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(nislands, PROTO_MAX_GPUS / 2);
    for (int g = 0; g < PROTO_MAX_GPUS; g++)
        assert_int_equal(island[g], g / 2);
    mu_buf_release(&b);

    /* A 65th GPU column is too many. */
    mu_buf_init(&b, 0);
    for (int j = 0; j <= PROTO_MAX_GPUS; j++)
        assert_int_equal(mu_buf_appendf(&b, &err, "\tGPU%d", j), 0);
    assert_int_equal(wrk_topo_parse(b.data, PROTO_MAX_GPUS, island, &nislands, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_string_equal(err.msg, "line 1: more than 64 GPU columns");
    mu_buf_release(&b);
}

/* ---- --gpu-islands ---- */

struct islands_case {
    const char *text;
    int ngpus;
    int code; /* 0 = parses */
    const char *msg;
    int island[8];
};

static const struct islands_case islands_cases[] = {
    { "4,4", 8, 0, NULL, { 0, 0, 0, 0, 1, 1, 1, 1 } },
    { "8", 8, 0, NULL, { 0, 0, 0, 0, 0, 0, 0, 0 } },
    { "2,2,4", 8, 0, NULL, { 0, 0, 1, 1, 2, 2, 2, 2 } },
    { "1,1", 2, 0, NULL, { 0, 1 } },
    { "1", 1, 0, NULL, { 0 } },
    { "4,3", 8, MU_E_RANGE, "island sizes add up to 7 GPUs, expected 8", { 0 } },
    { "1", 2, MU_E_RANGE, "island sizes add up to 1 GPU, expected 2", { 0 } },
    { "4,5", 8, MU_E_RANGE, "island sizes add up to more than 8 GPUs", { 0 } },
    { "1,1,1", 2, MU_E_RANGE, "add up to more than 2 GPUs", { 0 } },
    { "1", 0, MU_E_RANGE, "add up to more than 0 GPUs", { 0 } },
    { "4,0,4", 8, MU_E_PARSE, "island 2: expected a size in 1..64, got '0'", { 0 } },
    { "4,,4", 8, MU_E_PARSE, "island 2: expected a size in 1..64, got ''", { 0 } },
    { ",8", 8, MU_E_PARSE, "island 1: expected a size", { 0 } },
    { "8,", 8, MU_E_PARSE, "island 2: expected a size", { 0 } },
    { "", 8, MU_E_PARSE, "expected island sizes separated by commas, e.g. 4,4", { 0 } },
    { "x", 8, MU_E_PARSE, "island 1: expected a size in 1..64, got 'x'", { 0 } },
    { "-4,12", 8, MU_E_PARSE, "got '-4'", { 0 } },
    { " 4,4", 8, MU_E_PARSE, "got ' 4'", { 0 } },
    { "4;4", 8, MU_E_PARSE, "got '4;4'", { 0 } },
    { "65", 64, MU_E_PARSE, "got '65'", { 0 } },
    { "99999999999999999999999", 8, MU_E_PARSE, "got '99999999999999999999'", { 0 } },
    { "4,4", 65, MU_E_INVAL, "65 GPUs: expected 0..64", { 0 } },
};

static void test_gpu_islands_parse(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(islands_cases); i++) {
        const struct islands_case *c = &islands_cases[i];
        int island[PROTO_MAX_GPUS];
        struct mu_err err;
        int r;

        memset(island, 0x55, sizeof(island));
        mu_err_clear(&err);
        r = wrk_gpu_islands_parse(c->text, c->ngpus, island, &err);
        if (c->code == 0) {
            if (r != 0)
                fail_msg("case %zu '%s': %s", i, c->text, err.msg);
            for (int g = 0; g < c->ngpus; g++)
                assert_int_equal(island[g], c->island[g]);
            assert_int_equal(island[c->ngpus], 0x55555555);
            continue;
        }
        if (r != -1)
            fail_msg("case %zu '%s': parsed", i, c->text);
        if (err.code != c->code || !strstr(err.msg, c->msg))
            fail_msg("case %zu: got %s '%s', want %s '%s'", i, mu_err_name(err.code), err.msg,
                     mu_err_name(c->code), c->msg);
        assert_int_equal(island[0], 0x55555555);
    }

    /* The biggest list: 64 islands of one GPU. */
    {
        char text[256] = "";
        int island[PROTO_MAX_GPUS];
        struct mu_err err;
        for (int g = 0; g < PROTO_MAX_GPUS; g++)
            mu_strlcpy(text + strlen(text), g ? ",1" : "1", sizeof(text) - strlen(text));
        assert_int_equal(wrk_gpu_islands_parse(text, PROTO_MAX_GPUS, island, &err), 0);
        for (int g = 0; g < PROTO_MAX_GPUS; g++)
            assert_int_equal(island[g], g);
        assert_int_equal(wrk_gpu_islands_parse(NULL, 8, island, &err), -1);
    }
}

static void test_gpus_simulate_and_visible(void **state)
{
    struct proto_gpu gpus[4];
    struct mu_err err;
    char buf[256];
    int bind[3] = { 0, 2, 3 };
    (void)state;

    int islands[4] = { 0, 0, 1, 1 };
    wrk_gpus_simulate(gpus, 4, islands);
    for (int i = 0; i < 4; i++)
        assert_int_equal(gpus[i].island, i / 2);
    wrk_gpus_simulate(gpus, 4, NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gpus[i].index, i);
        assert_string_equal(gpus[i].uuid, "");
        assert_string_equal(gpus[i].model, "simulated");
        assert_int_equal(gpus[i].island, 0);
    }
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, true, bind, 3, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "0,2,3");
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, true, bind, 0, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "");

    mu_strlcpy(gpus[0].uuid, "GPU-aaa", sizeof(gpus[0].uuid));
    mu_strlcpy(gpus[2].uuid, "GPU-ccc", sizeof(gpus[2].uuid));
    mu_strlcpy(gpus[3].uuid, "GPU-ddd", sizeof(gpus[3].uuid));
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, false, bind, 3, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "GPU-aaa,GPU-ccc,GPU-ddd");
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, false, bind, 3, buf, 10, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);

    int bad[2] = { 1, 9 };
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, true, bad, 2, buf, sizeof(buf), &err), -1);
    assert_string_equal(err.msg, "gpu 9 is not on this node");
    int dup[2] = { 1, 1 };
    assert_int_equal(wrk_gpus_format_visible(gpus, 4, true, dup, 2, buf, sizeof(buf), &err), -1);
    assert_string_equal(err.msg, "gpu 1 is bound twice");
}

static void test_gpus_discover(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char *dir = make_tmpdir();
    char sample[1024];
    char script[1024];
    char prog[1024];
    int n = -1;
    (void)state;

    /* A stand-in nvidia-smi that checks its arguments and prints a captured sample. */
    data_path("p4d.24xlarge.csv", sample, sizeof(sample));
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "#!/bin/sh\n"
                                 "[ \"$1\" = --query-gpu=index,uuid,name,memory.total,pci.bus_id ]"
                                 " || exit 7\n"
                                 "[ \"$2\" = --format=csv,noheader,nounits ] || exit 8\n"
                                 "cat '%s'\n",
                                 sample),
                     0);
    assert_int_equal(mu_snprintf(prog, sizeof(prog), "%s/nvidia-smi-ok", dir), 0);
    write_file(prog, script, 0755);
    if (wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(n, 8);
    assert_string_equal(gpus[7].model, "NVIDIA A100-SXM4-40GB");
    assert_string_equal(gpus[7].pci_bus_id, "00000000:A0:1D.0");

    /* A driver failure: exit status and the first line of stderr. */
    assert_int_equal(mu_snprintf(prog, sizeof(prog), "%s/nvidia-smi-fail", dir), 0);
    write_file(prog,
               "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch' >&2\n"
               "echo second line >&2\nexit 9\n",
               0755);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), -1);
    assert_non_null(
        strstr(err.msg, "exited with status 9: Failed to initialize NVML: Driver/library version "
                        "mismatch"));
    assert_null(strstr(err.msg, "second line"));

    /* nvidia-smi prints its best-known failure on stdout. */
    write_file(prog,
               "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the "
               "NVIDIA driver.\"\nexit 9\n",
               0755);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), -1);
    assert_non_null(strstr(err.msg, "status 9: NVIDIA-SMI has failed"));

    /* Output that is not CSV names the program and the line. */
    write_file(prog, "#!/bin/sh\necho hello\n", 0755);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), -1);
    assert_non_null(strstr(err.msg, "output: line 1: expected 5 comma-separated fields"));

    assert_int_equal(
        wrk_gpus_discover("nvidia-smi-muster-test-missing", gpus, PROTO_MAX_GPUS, &n, &err), -1);
    assert_int_equal(err.code, MU_E_NOTFOUND);
    assert_string_equal(err.msg, "cannot run 'nvidia-smi-muster-test-missing': No such file or "
                                 "directory; hint: pass --gpus N to simulate GPUs");
    rm_rf(dir);
    free(dir);
}

/*
 * Writes a stand-in nvidia-smi at dir/name that prints the CSV sample csv_file (piped through
 * csv_filter, e.g. "tac") for the GPU query, and runs topo_cmd (shell) for `topo -m`.
 */
static void write_nvsmi(char *prog,
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
static void cat_data(char *buf, size_t size, const char *file)
{
    char path[1024];
    data_path(file, path, sizeof(path));
    assert_int_equal(mu_snprintf(buf, size, "cat '%s'", path), 0);
}

static void test_topo_discover(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char *dir = make_tmpdir();
    char prog[1024];
    char cmd[1200];
    int n = -1;
    int nislands = -1;
    (void)state;

    /* Two NVLink pairs behind 4 GPUs: the islands land on the GPUs. */
    cat_data(cmd, sizeof(cmd), "topo-nvlink-pairs.txt");
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-pairs", "g6e.12xlarge.csv", "cat", cmd);
    if (wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(n, 4);
    if (wrk_topo_discover(prog, gpus, n, &nislands, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(nislands, 2);
    assert_int_equal(gpus[0].island, 0);
    assert_int_equal(gpus[1].island, 0);
    assert_int_equal(gpus[2].island, 1);
    assert_int_equal(gpus[3].island, 1);

    /* The CSV in another order: islands follow the nvidia-smi index, not the line. */
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-tac", "g6e.12xlarge.csv", "tac", cmd);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), 0);
    assert_int_equal(gpus[0].index, 3);
    assert_int_equal(wrk_topo_discover(prog, gpus, n, NULL, &err), 0);
    assert_int_equal(gpus[0].island, 1); /* GPU3 */
    assert_int_equal(gpus[1].island, 1); /* GPU2 */
    assert_int_equal(gpus[2].island, 0); /* GPU1 */
    assert_int_equal(gpus[3].island, 0); /* GPU0 */

    /* PCIe only: one island per GPU. */
    cat_data(cmd, sizeof(cmd), "topo-g6e.12xlarge.txt");
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-pcie", "g6e.12xlarge.csv", "cat", cmd);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), 0);
    assert_int_equal(wrk_topo_discover(prog, gpus, n, &nislands, &err), 0);
    assert_int_equal(nislands, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(gpus[i].island, i);

    rm_rf(dir);
    free(dir);
}

static void test_topo_discover_failures(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char *dir = make_tmpdir();
    char prog[1024];
    char cmd[1200];
    int n = -1;
    int nislands = -1;
    (void)state;

    cat_data(cmd, sizeof(cmd), "topo-g6e.12xlarge.txt");
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-pcie", "g6e.12xlarge.csv", "cat", cmd);
    assert_int_equal(wrk_gpus_discover(prog, gpus, PROTO_MAX_GPUS, &n, &err), 0);
    assert_int_equal(n, 4);

    /* Failures leave the GPUs as they were. */
    for (int i = 0; i < 4; i++)
        gpus[i].island = 7;
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-fail", "g6e.12xlarge.csv", "cat",
                "echo 'Failed to initialize NVML: Unknown Error' >&2; exit 3");
    assert_int_equal(wrk_topo_discover(prog, gpus, 4, &nislands, &err), -1);
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(
        strstr(err.msg, "exited with status 3: Failed to initialize NVML: Unknown Error"));
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-garbage", "g6e.12xlarge.csv", "cat",
                "echo 'topo: unknown option'");
    assert_int_equal(wrk_topo_discover(prog, gpus, 4, &nislands, &err), -1);
    assert_non_null(
        strstr(err.msg, "nvsmi-garbage topo -m' output: line 1: expected the header row"));
    cat_data(cmd, sizeof(cmd), "topo-p5.48xlarge.txt");
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-count", "g6e.12xlarge.csv", "cat", cmd);
    assert_int_equal(wrk_topo_discover(prog, gpus, 4, &nislands, &err), -1);
    assert_non_null(strstr(err.msg, "the matrix has 8 GPUs, expected 4"));
    for (int i = 0; i < 4; i++)
        assert_int_equal(gpus[i].island, 7);

    /* An index the matrix has no row for. */
    gpus[0].index = 0;
    gpus[1].index = 5;
    mu_strlcpy(cmd, "printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV4\\nGPU1\\tNV4\\t X \\n'",
               sizeof(cmd));
    write_nvsmi(prog, sizeof(prog), dir, "nvsmi-index", "g6e.12xlarge.csv", "cat", cmd);
    assert_int_equal(wrk_topo_discover(prog, gpus, 2, &nislands, &err), -1);
    assert_string_equal(err.msg, "GPU index 5 has no row in the 2-GPU topology matrix");
    gpus[1].index = 1;
    assert_int_equal(wrk_topo_discover(prog, gpus, 2, &nislands, &err), 0);
    assert_int_equal(nislands, 1);

    assert_int_equal(wrk_topo_discover("nvidia-smi-muster-test-missing", gpus, 2, NULL, &err), -1);
    assert_int_equal(err.code, MU_E_NOTFOUND);
    assert_int_equal(wrk_topo_discover(prog, gpus, 0, NULL, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    rm_rf(dir);
    free(dir);
}

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

/* ---- environment ---- */

static void fill_launch(struct wrk_launch *l, const char *state_dir)
{
    memset(l, 0, sizeof(*l));
    l->state_dir = state_dir;
    l->node = "gpu-node-7";
    l->job = "1732270000123-0";
    l->task = 1;
    l->attempt = 2;
    l->cuda_visible = "0,1";
    l->world_size = 4;
    l->local_rank = 1;
    l->local_world_size = 2;
    l->node_rank = 0;
    l->master_addr = "10.0.0.5";
    l->master_port = 29500;
}

static void test_env_build(void **state)
{
    char *base[] = { (char *)"PATH=/usr/bin:/bin",
                     (char *)"FOO=base",
                     (char *)"MUSTER_RESUME_FROM=old",
                     (char *)"RANK=99",
                     (char *)"NOEQUALS",
                     NULL };
    char *spec[] = { (char *)"FOO=spec", (char *)"RANK=5", (char *)"EMPTY=", (char *)"A=b=c" };
    struct wrk_launch l;
    struct mu_err err;
    char **envp;
    (void)state;

    fill_launch(&l, "/var/lib/muster/worker/n1");
    l.nenv = 4;
    l.env = spec;
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
    l.resume_from = "s3://bucket/ckpt/step-400";
    envp = wrk_env_build(&l, NULL, &err);
    assert_non_null(envp);
    assert_string_equal(wrk_env_get(envp, "CUDA_VISIBLE_DEVICES"), "GPU-aaa,GPU-bbb");
    assert_string_equal(wrk_env_get(envp, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    assert_string_equal(wrk_env_get(envp, "MUSTER_RESUME_FROM"), "s3://bucket/ckpt/step-400");
    assert_null(wrk_env_get(envp, "PATH"));
    wrk_env_free(envp);

    /* Bad spec entries. */
    char *bad1[] = { (char *)"NOVALUE" };
    char *bad2[] = { (char *)"=x" };
    l.nenv = 1;
    l.env = bad1;
    assert_null(wrk_env_build(&l, base, &err));
    assert_string_equal(err.msg, "env entry 'NOVALUE': expected KEY=VALUE");
    l.env = bad2;
    assert_null(wrk_env_build(&l, base, &err));
    assert_int_equal(err.code, MU_E_INVAL);
    wrk_env_free(NULL);
}

/* ---- launcher ---- */

static void test_launch_exit_code(void **state)
{
    char *dir = make_tmpdir();
    char *argv[] = { (char *)"/bin/sh", (char *)"-c",
                     (char *)"echo $RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES; pwd; "
                             "echo oops >&2; [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] "
                             "|| echo not-leader; exit 3" };
    struct wrk_launch l;
    struct mu_err err;
    char path[1024];
    char *text;
    pid_t pid = -1;
    int status = 0;
    (void)state;

    fill_launch(&l, dir);
    l.argc = 3;
    l.argv = argv;
    if (wrk_launch_start(&l, NULL, &pid, &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(pid > 0);
    assert_int_equal(wait_exit(pid, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);

    assert_int_equal(
        wrk_task_path(dir, "logs", l.job, l.attempt, l.task, ".out", path, sizeof(path), &err), 0);
    assert_non_null(strstr(path, "/logs/1732270000123-0.2.1.out"));
    text = mu_file_read(path, 4096, NULL, &err);
    assert_non_null(text);
    char want[1200];
    assert_int_equal(mu_snprintf(want, sizeof(want), "1 4 0,1\n%s\n", dir), 0);
    assert_string_equal(text, want);
    free(text);
    assert_int_equal(
        wrk_task_path(dir, "logs", l.job, l.attempt, l.task, ".err", path, sizeof(path), &err), 0);
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
    rm_rf(dir);
    free(dir);
}

static void test_launch_kill_group(void **state)
{
    char *dir = make_tmpdir();
    char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)"sleep 100 & echo $!; wait" };
    struct wrk_launch l;
    struct mu_err err;
    char path[1024];
    pid_t pid = -1;
    int64_t child = 0;
    int status = 0;
    (void)state;

    /* Become the subreaper so that the orphaned sleep is ours to wait for. */
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    fill_launch(&l, dir);
    l.argc = 3;
    l.argv = argv;
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), 0);
    assert_int_equal(getpgid(pid), pid);
    assert_int_equal(
        wrk_task_path(dir, "logs", l.job, l.attempt, l.task, ".out", path, sizeof(path), &err), 0);
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
    rm_rf(dir);
    free(dir);
}

static void test_launch_failures(void **state)
{
    char *dir = make_tmpdir();
    char *missing[] = { (char *)"nosuchcmd-muster-test" };
    char *abs_missing[] = { (char *)"/nonexistent/bin/tool" };
    char *ok[] = { (char *)"/bin/true" };
    char notexec_path[1024];
    char *notexec[] = { notexec_path };
    struct wrk_launch l;
    struct mu_err err;
    pid_t pid = -1;
    (void)state;

    fill_launch(&l, dir);
    l.argc = 1;
    l.argv = missing;
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_NOTFOUND);
    assert_string_equal(err.msg, "cannot run 'nosuchcmd-muster-test': No such file or directory");
    l.argv = abs_missing;
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "cannot run '/nonexistent/bin/tool': No such file or directory");
    assert_int_equal(mu_snprintf(notexec_path, sizeof(notexec_path), "%s/notexec", dir), 0);
    write_file(notexec_path, "echo hi\n", 0644);
    l.argv = notexec;
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_SYS);
    assert_non_null(strstr(err.msg, "/notexec': Permission denied"));

    l.argv = ok;
    l.workdir = "/nonexistent/muster/x";
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "workdir '/nonexistent/muster/x': No such file or directory");

    l.workdir = NULL;
    l.job = "../etc";
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    l.job = "1-0";
    l.argc = 0;
    assert_int_equal(wrk_launch_start(&l, NULL, &pid, &err), -1);
    assert_string_equal(err.msg, "empty command");
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

/* ---- the agent against an in-process scheduler ---- */

struct fake_sched {
    void *ctx;
    void *router;
    struct wrk_agent *agent;
    char *dir;
    uint64_t seq;
    char endpoint[256];
    struct wrk_config cfg; /* what the agent was started with, for a restart */
    uint64_t last_echo_ms; /* echo_ms of the worker's latest HELLO or HEARTBEAT */
    int answer_lease_s;    /* > 0: answer each HELLO and HEARTBEAT at once, with this lease */
};

static void send_to_worker(struct fake_sched *f, struct proto_msg *m, uint64_t epoch);

/*
 * proto_recv on the router, as the scheduler would: notes the echo_ms of each HELLO and
 * HEARTBEAT and, with answer_lease_s, answers it (ok, the echo carried back, the lease).
 */
static int fake_recv(struct fake_sched *f, char *id, size_t id_size, struct proto_msg *out)
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
static bool expect_msg(struct fake_sched *f,
                       enum proto_type type,
                       struct proto_msg *out,
                       int timeout_ms)
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
static bool wait_log(struct fake_sched *f, const char *name, const char *want)
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

static void send_to_worker(struct fake_sched *f, struct proto_msg *m, uint64_t epoch)
{
    struct mu_err err;
    m->seq = ++f->seq;
    m->epoch = epoch;
    if (proto_send(f->router, "n1", m, &err) != 0)
        fail_msg("%s", err.msg);
}

static void send_simple(struct fake_sched *f,
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

static void send_bind(
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

/* When set, the next agent watches this metadata service every second and has no zone label. */
static const char *fake_imds_url;
/* When set, the next agent is a root worker without --allow-root that allows these users. */
static const char *const *fake_allow_users;
static int fake_nallow_users;

/*
 * Starts an agent against a fresh ROUTER: sim_gpus simulated GPUs laid out by islands (an
 * --gpu-islands list, NULL = one island), or, with sim_gpus -1, GPUs discovered through the
 * stand-in nvidia_smi.  Labels zone, block and rack.
 */
static void fake_sched_start_with(struct fake_sched *f,
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
    cfg.sim_gpus = sim_gpus;
    cfg.nvidia_smi = nvidia_smi;
    if (islands && wrk_gpu_islands_parse(islands, sim_gpus, cfg.sim_island, &err) != 0)
        fail_msg("%s", err.msg);
    cfg.cpus = 4;
    cfg.memory_mb = 1000;
    cfg.heartbeat_s = 1;
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

static void fake_sched_start(struct fake_sched *f)
{
    fake_sched_start_with(f, 2, "1,1", NULL);
}

static void fake_sched_stop(struct fake_sched *f)
{
    wrk_agent_free(f->agent);
    assert_int_equal(zmq_close(f->router), 0);
    assert_int_equal(zmq_ctx_term(f->ctx), 0);
    rm_rf(f->dir);
    free(f->dir);
}

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

/* ---- IMDS documents ---- */

struct action_case {
    const char *body;
    int code;         /* 0 = parses */
    const char *want; /* the action, or a piece of the message */
    uint64_t time_ms;
};

static const struct action_case action_cases[] = {
    { "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}", 0, "terminate",
      UINT64_C(1505722920000) },
    { "{\"action\":\"stop\",\"time\":\"2026-11-22T08:22:00Z\"}\n", 0, "stop",
      UINT64_C(1795335720000) },
    { " {\"time\":\"2024-02-29T23:59:59.250Z\",\"action\":\"hibernate\",\"extra\":[1,{}]} ", 0,
      "hibernate", UINT64_C(1709251199250) },
    { "", MU_E_PARSE, "empty reply", 0 },
    { "<?xml version=\"1.0\"?><html>404 - Not Found</html>", MU_E_PARSE, "not JSON", 0 },
    { "[\"terminate\"]", MU_E_PARSE, "expected a JSON object", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00Z\"} x", MU_E_PARSE,
      "bytes after the JSON value", 0 },
    { "{\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE, "missing \"action\"", 0 },
    { "{\"action\":\"reboot\",\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE, "got 'reboot'", 0 },
    { "{\"action\":7,\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE,
      "\"action\": expected a string", 0 },
    { "{\"action\":\"terminate\"}", MU_E_PARSE, "missing \"time\"", 0 },
    { "{\"action\":\"terminate\",\"time\":1505722920}", MU_E_PARSE, "\"time\": expected a string",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18 08:22:00\"}", MU_E_PARSE,
      "expected YYYY-MM-DDThh:mm:ssZ", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00+02:00\"}", MU_E_PARSE,
      "ending in 'Z'", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-02-29T08:22:00Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T24:00:00Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"1969-12-31T23:59:59Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00.Z\"}", MU_E_PARSE,
      "digits after '.'", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00.1234567890Z\"}", MU_E_PARSE,
      "more than 9", 0 },
    { "{\"action\":\"terminate\",\"action\":\"stop\",\"time\":\"2017-09-18T08:22:00Z\"", MU_E_PARSE,
      "not JSON", 0 },
};

static void test_imds_parse_action(void **state)
{
    struct wrk_imds_action act;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(action_cases); i++) {
        const struct action_case *c = &action_cases[i];
        int r;
        memset(&act, 0, sizeof(act));
        mu_err_clear(&err);
        r = wrk_imds_parse_action(c->body, strlen(c->body), &act, &err);
        if (c->code == 0) {
            if (r != 0)
                fail_msg("case %zu: %s", i, err.msg);
            assert_string_equal(act.action, c->want);
            assert_int_equal(act.time_ms, c->time_ms);
        } else {
            if (r != -1 || err.code != c->code || !strstr(err.msg, c->want))
                fail_msg("case %zu: r=%d code=%d msg='%s', want '%s'", i, r, err.code, err.msg,
                         c->want);
            assert_string_equal(act.action, ""); /* untouched */
        }
    }
    /* Not NUL-terminated: only len bytes count. */
    {
        const char body[] = "{\"action\":\"stop\",\"time\":\"2017-09-18T08:22:00Z\"}GARBAGE";
        assert_int_equal(wrk_imds_parse_action(body, sizeof(body) - 8, &act, &err), 0);
        assert_string_equal(act.action, "stop");
        assert_int_equal(wrk_imds_parse_action(body, sizeof(body) - 1, &act, &err), -1);
    }
    /* Over the cap. */
    assert_int_equal(wrk_imds_parse_action("{}", WRK_IMDS_MAX_BODY + 1, &act, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

static void test_imds_parse_rebalance(void **state)
{
    static const struct {
        const char *body;
        int rc;
        uint64_t ms;
        const char *msg;
    } cases[] = {
        { "{\"noticeTime\": \"2020-10-27T08:22:00Z\"}", 0, UINT64_C(1603786920000), "" },
        { "{\"noticeTime\":\"2000-01-01T00:00:00Z\",\"x\":null}", 0, UINT64_C(946684800000), "" },
        { "{}", -1, 0, "missing \"noticeTime\"" },
        { "{\"noticeTime\": null}", -1, 0, "expected a string" },
        { "{\"noticeTime\": \"soon\"}", -1, 0, "\"noticeTime\": time 'soon'" },
        { "\"2020-10-27T08:22:00Z\"", -1, 0, "expected a JSON object" },
        { "{\"noticeTime\": \"2020-13-27T08:22:00Z\"}", -1, 0, "no such date" },
    };
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        uint64_t ms = 42;
        int r = wrk_imds_parse_rebalance(cases[i].body, strlen(cases[i].body), &ms, &err);
        if (r != cases[i].rc)
            fail_msg("case %zu: r=%d %s", i, r, err.msg);
        if (r == 0)
            assert_int_equal(ms, cases[i].ms);
        else if (!strstr(err.msg, cases[i].msg) || ms != 42)
            fail_msg("case %zu: '%s', want '%s'", i, err.msg, cases[i].msg);
    }
}

/* ---- the metadata service stand-in (tests/imds/imds_mock.py) ---- */

/* The mock that runs now, so that a failed test's teardown can still stop it. */
static pid_t mock_live_pid;

struct mock_imds {
    pid_t pid;
    int port;
    char url[64];
    char *dir;
};

/* Starts imds_mock.py with extra arguments; false (the caller skips) when python3 is missing. */
static bool mock_start(struct mock_imds *mk, const char *const *extra, int nextra)
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

static void mock_stop(struct mock_imds *mk)
{
    int status;
    mock_live_pid = 0;
    assert_int_equal(kill(mk->pid, SIGTERM), 0);
    assert_int_equal(wait_exit(mk->pid, &status), 0);
    rm_rf(mk->dir);
    free(mk->dir);
}

static int mock_teardown(void **state)
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
static char *mock_call(const struct mock_imds *mk, const char *path, const char *body)
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

static void mock_post(const struct mock_imds *mk, const char *path, const char *body)
{
    free(mock_call(mk, path, body));
}

/* The integer after "key": in the mock's /mock/stats. */
static int64_t mock_stat(const struct mock_imds *mk, const char *key)
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

/* Turns the watcher's loop for ms; returns the first event of `type` (if want) or none. */
static bool imds_turn(struct wrk_imds *w,
                      int ms,
                      enum wrk_imds_event_type type,
                      struct wrk_imds_event *out,
                      int *events_seen)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)ms;
    while (mu_time_mono_ms() < deadline) {
        struct pollfd fds[8];
        struct wrk_imds_event ev;
        uint64_t now = mu_time_mono_ms();
        uint64_t t0;
        int n = wrk_imds_fds(w, fds, 8);
        (void)poll(fds, (nfds_t)n, wrk_imds_timeout_ms(w, now, (int)(deadline - now)));
        t0 = mu_time_mono_ms();
        wrk_imds_service(w, fds, n);
        /* Never blocks the loop, even when the service stalls. */
        assert_true(mu_time_mono_ms() - t0 < 200);
        while (wrk_imds_event_next(w, &ev)) {
            if (events_seen)
                (*events_seen)++;
            if (out && ev.type == type) {
                *out = ev;
                return true;
            }
        }
    }
    return false;
}

/* The time in the mock's reply to /mock/notice, as wall ms. */
static uint64_t mock_notice(const struct mock_imds *mk, const char *body)
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

/* Identity first, then tokens renewed before they expire, and after a 401. */
static void watcher_tokens(struct wrk_imds *w, const struct mock_imds *mk)
{
    const struct wrk_imds_identity *id;
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    uint64_t tokens;
    int seen = 0;

    memset(&ev, 0, sizeof(ev));
    assert_int_equal(wrk_imds_wait_identity(w, 5000), 0);
    id = wrk_imds_identity_get(w);
    assert_non_null(id);
    assert_string_equal(id->instance_type, "g6e.12xlarge");
    assert_string_equal(id->zone, "us-west-2b");
    assert_string_equal(id->lifecycle, "on-demand");
    assert_true(imds_turn(w, 100, WRK_IMDS_IDENTITY, &ev, NULL));
    assert_int_equal(mock_stat(mk, "ttl_last"), 2);

    /* Over 4.5 s of 1 s polls with a 2 s token: renewed each time before it expires. */
    assert_false(imds_turn(w, 4500, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    wrk_imds_stats_get(w, &st);
    assert_true(st.tokens >= 3);
    assert_int_equal(st.unauthorized, 0);
    assert_int_equal(st.failures, 0);
    assert_int_equal(st.garbled, 0);
    assert_int_equal(mock_stat(mk, "unauthorized"), 0);

    /* Tokens revoked: the next GET gets 401, a new token and the GET again. */
    tokens = st.tokens;
    mock_post(mk, "/mock/expire-tokens", "");
    assert_false(imds_turn(w, 1500, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_int_equal(st.unauthorized, 1);
    assert_true(st.tokens >= tokens + 1);
    assert_int_equal(st.garbled, 0);
}

/* Notices and recommendations: one event each, with their times. */
static void watcher_notices(struct wrk_imds *w, const struct mock_imds *mk)
{
    struct wrk_imds_event ev;
    uint64_t want;
    int seen = 0;

    memset(&ev, 0, sizeof(ev));
    want = mock_notice(mk, "{\"action\":\"terminate\",\"in_s\":120}");
    assert_true(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    assert_string_equal(ev.action, "terminate");
    assert_int_equal(ev.time_ms, want);
    assert_true(ev.time_ms > mu_time_wall_ms() + 115000);
    /* Not repeated on later polls. */
    assert_false(imds_turn(w, 2200, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    /* A different notice is a new event. */
    (void)mock_notice(mk, "{\"action\":\"stop\",\"in_s\":60}");
    assert_true(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    assert_string_equal(ev.action, "stop");

    mock_post(mk, "/mock/rebalance", "");
    assert_true(imds_turn(w, 2500, WRK_IMDS_REBALANCE, &ev, NULL));
    assert_string_equal(ev.action, "rebalance");
    assert_true(ev.time_ms <= mu_time_wall_ms() && ev.time_ms + 5000 > mu_time_wall_ms());
    seen = 0;
    assert_false(imds_turn(w, 1500, WRK_IMDS_REBALANCE, &ev, &seen));
    assert_int_equal(seen, 0);
}

/* Garbage and a stalled service: counted and logged, no event, the loop never waits. */
static void watcher_trouble(struct wrk_imds *w, const struct mock_imds *mk)
{
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    int seen = 0;

    mock_post(mk, "/mock/clear", "");
    mock_post(mk, "/mock/garble", "{\"count\":2}");
    assert_false(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    wrk_imds_stats_get(w, &st);
    if (st.garbled != 2)
        fail_msg("garbled %" PRIu64 " failures %" PRIu64 " unauthorized %" PRIu64
                 " requests %" PRIu64 " cycles %" PRIu64,
                 st.garbled, st.failures, st.unauthorized, st.requests, st.cycles);

    /* The request times out after 1 s (imds_turn checks that no service call blocks). */
    mock_post(mk, "/mock/stall", "{\"count\":1,\"ms\":2500}");
    assert_false(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_int_equal(st.failures, 1);
}

static void test_imds_watcher(void **state)
{
    static const char *const extra[] = { "--instance-type", "g6e.12xlarge", "--zone",
                                         "us-west-2b",      "--lifecycle",  "on-demand" };
    struct mock_imds mk;
    struct wrk_imds_config cfg;
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    struct wrk_imds *w;
    struct mu_err err;
    (void)state;

    if (!mock_start(&mk, extra, (int)MU_ARRAY_LEN(extra)))
        skip();
    memset(&cfg, 0, sizeof(cfg));
    cfg.url = mk.url;
    cfg.interval_s = 1;
    cfg.token_ttl_s = 2; /* renewed 0.5 s before it expires */
    cfg.want_identity = true;
    w = wrk_imds_new(&cfg, &err);
    if (!w)
        fail_msg("%s", err.msg);
    watcher_tokens(w, &mk);
    watcher_notices(w, &mk);
    watcher_trouble(w, &mk);
    wrk_imds_free(w);
    mock_stop(&mk);

    /* Nobody listening: failures, no events, no crash; identity not known. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.url = mk.url; /* the port is closed now */
    cfg.interval_s = 1;
    cfg.want_identity = true;
    w = wrk_imds_new(&cfg, &err);
    assert_non_null(w);
    assert_int_equal(wrk_imds_wait_identity(w, 3000), -1);
    assert_null(wrk_imds_identity_get(w));
    assert_false(imds_turn(w, 1200, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_true(st.failures >= 2);
    wrk_imds_free(w);

    /* Bad configuration. */
    cfg.url = "https://169.254.169.254";
    assert_null(wrk_imds_new(&cfg, &err));
    assert_int_equal(err.code, MU_E_INVAL);
    cfg.url = "http://169.254.169.254/";
    cfg.interval_s = 301;
    assert_null(wrk_imds_new(&cfg, &err));
    assert_int_equal(err.code, MU_E_RANGE);
}

/* ---- the agent: checkpoints and spot notices ---- */

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

/* Turns the loop until the task of job exits; returns the CHECKPOINT_DONE paths seen before. */
static int until_exit(struct fake_sched *f,
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

/* ---- issue 5: task records, the shim, restart, self-fencing, identities ---- */

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

static void test_shim_spec(void **state)
{
    char a0[] = "/bin/sh", a1[] = "-c", a2[] = "echo a=b";
    char e0[] = "A=1", e1[] = "B=x=y", e2[] = "EMPTY=";
    char *argv[] = { a0, a1, a2, NULL };
    char *envp[] = { e0, e1, e2, NULL };
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
    /* This process is no shim; pid 0 and 1 never are. */
    assert_false(wrk_shim_is_running((int)getpid(), "/s/tasks/1-0.1.0"));
    assert_false(wrk_shim_is_running(1, "/s/tasks/1-0.1.0"));
}

/* The HELLO's entry for job, or NULL. */
static const struct proto_task_ref *hello_find(const struct proto_msg *m, const char *job)
{
    for (int i = 0; i < m->ntasks; i++) {
        if (strcmp(m->tasks[i].job, job) == 0)
            return &m->tasks[i];
    }
    return NULL;
}

static void record_write(const char *dir, const char *job, int shim_pid, const char *exit_json)
{
    char path[1024];
    char text[256];
    assert_int_equal(mu_snprintf(text, sizeof(text),
                                 "{\"job\":\"%s\",\"task\":0,\"attempt\":1,\"pid\":%d,"
                                 "\"shim_pid\":%d}",
                                 job, shim_pid, shim_pid),
                     0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/%s.1.0.json", dir, job), 0);
    write_file(path, text, 0644);
    if (exit_json) {
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/%s.1.0.exit", dir, job), 0);
        write_file(path, exit_json, 0644);
    }
}

static bool file_exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/%s", dir, name), 0);
    return stat(path, &st) == 0;
}

static void test_agent_restart(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct mu_err err;
    const struct proto_task_ref *r;
    char script[1200];
    char release[1100];
    int pid;
    (void)state;

    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(release, sizeof(release), "%s/release", f.dir), 0);
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "while [ ! -e %s ]; do sleep 0.02; done; exit 5", release),
                     0);
    send_bind(&f, "1900-0", 0, script, 0, 5);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    pid = m.task.pid;
    proto_msg_release(&m);
    assert_true(file_exists(f.dir, "tasks/1900-0.1.0.json"));

    /* Records a previous worker left: one exited with 9, one whose shim is gone (this test
     * process is not a shim), an exit without a record, and a stale spec file. */
    record_write(f.dir, "1901-0", 4242, "{\"exit_code\":9,\"signal\":0,\"ended_ms\":1}");
    record_write(f.dir, "1902-0", (int)getpid(), NULL);
    {
        char path[1024];
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/1903-0.1.0.exit", f.dir), 0);
        write_file(path, "{\"exit_code\":0,\"signal\":0}", 0644);
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/.spec.abc123", f.dir), 0);
        write_file(path, "junk", 0600);
    }

    /* The worker "crashes" (no shutdown: the task keeps running) and a new one starts. */
    wrk_agent_free(f.agent);
    f.agent = wrk_agent_new(&f.cfg, &err);
    if (!f.agent)
        fail_msg("%s", err.msg);
    assert_false(file_exists(f.dir, "tasks/1903-0.1.0.exit"));
    assert_false(file_exists(f.dir, "tasks/.spec.abc123"));
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    assert_int_equal(m.ntasks, 3);
    /* if/fail_msg rather than assert_non_null: gcc -O2 cannot see that the assert stops. */
    r = hello_find(&m, "1900-0");
    if (!r)
        fail_msg("task 1900-0 missing from HELLO");
    else
        assert_true(r->state == PROTO_TASK_RUNNING && r->pid == pid);
    r = hello_find(&m, "1901-0");
    if (!r)
        fail_msg("task 1901-0 missing from HELLO");
    else
        assert_true(r->state == PROTO_TASK_EXITED && r->exit_code == 9);
    r = hello_find(&m, "1902-0");
    if (!r)
        fail_msg("task 1902-0 missing from HELLO");
    else
        assert_int_equal(r->state, PROTO_TASK_LOST);
    proto_msg_release(&m);
    assert_int_equal(wrk_agent_task_count(f.agent), 3);

    /* The re-adopted task ends: its true code comes from the shim's exit file. */
    write_file(release, "", 0644);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    assert_string_equal(m.task.job, "1900-0");
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 5);
    assert_int_equal(m.task.pid, pid);
    proto_msg_release(&m);

    /* KILLs acknowledge: the records go, and the directory is empty again. */
    send_simple(&f, PROTO_KILL, "1900-0", 0, 1, 0, 0, 5);
    send_simple(&f, PROTO_KILL, "1901-0", 0, 1, 0, 0, 5);
    send_simple(&f, PROTO_KILL, "1902-0", 0, 1, 0, 0, 5);
    for (int i = 0; i < 500 && wrk_agent_task_count(f.agent) != 0; i++)
        assert_true(wrk_agent_poll(f.agent, 10, &err) >= 0);
    assert_int_equal(wrk_agent_task_count(f.agent), 0);
    assert_false(file_exists(f.dir, "tasks/1900-0.1.0.json"));
    assert_false(file_exists(f.dir, "tasks/1900-0.1.0.exit"));
    assert_false(file_exists(f.dir, "tasks/1901-0.1.0.json"));
    assert_false(file_exists(f.dir, "tasks/1902-0.1.0.json"));
    fake_sched_stop(&f);
}

static void test_agent_shim_survives_group_kill(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    char release[1100];
    char script[1200];
    (void)state;

    /* The shim leaves the worker's process group: a signal to that group (as a service
     * manager sends) does not reach the task. */
    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(release, sizeof(release), "%s/release", f.dir), 0);
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "while [ ! -e %s ]; do sleep 0.02; done; exit 0", release),
                     0);
    send_bind(&f, "1910-0", 0, script, 0, 5);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    assert_true(getsid(m.task.pid) != getsid(0));
    assert_true(getpgid(m.task.pid) == m.task.pid);
    proto_msg_release(&m);
    write_file(release, "", 0644);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    fake_sched_stop(&f);
}

/* A BIND of job's task 0, attempt 1, that traps the checkpoint signal and SIGTERM. */
static void send_bind_fenceable(struct fake_sched *f, const char *job)
{
    const char *argv[] = { "/bin/sh", "-c",
                           "trap 'echo usr1' USR1; trap 'echo term; exit 7' TERM; "
                           "echo ready; while :; do sleep 0.02; done" };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.attempt = 1;
    m.signal = SIGUSR1;
    m.grace_s = 1;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

/* The text of <dir>/<name> (a heap string), or NULL. */
static char *read_in(const char *dir, const char *name)
{
    char path[1100];
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/%s", dir, name), 0);
    return mu_file_read(path, 1 << 16, NULL, NULL);
}

static void test_agent_fence(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct wrk_lease *lease;
    struct mu_err err;
    char *text;
    char path[1100];
    uint64_t t0;
    uint64_t took;
    uint64_t until = 0;
    int lease_s = 0;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2; /* the scheduler answers every beat: the lease holds */
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_bind_fenceable(&f, "1920-0");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    proto_msg_release(&m);
    assert_true(wait_log(&f, "1920-0.1.0.out", "ready\n"));
    t0 = mu_time_mono_ms();
    /* Silence from here on: after the 2 s lease the shim sends USR1; after the 1 s grace, TERM. */
    f.answer_lease_s = 0;
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 10000));
    took = mu_time_mono_ms() - t0;
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 7);
    assert_true(m.task.fenced); /* the scheduler requeues it without counting a failure */
    proto_msg_release(&m);
    print_message("# fenced and stopped %" PRIu64 " ms after the scheduler fell silent\n", took);
    assert_true(took >= 1500);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/1920-0.1.0.out", f.dir), 0);
    text = mu_file_read(path, 4096, NULL, NULL);
    assert_non_null(text);
    assert_string_equal(text, "ready\nusr1\nterm\n");
    free(text);
    /* The shim says each step in the task's .err log, and its exit file says fenced. */
    text = read_in(f.dir, "logs/1920-0.1.0.err");
    assert_non_null(text);
    assert_non_null(strstr(text, "self-fencing: the node's lease ran out"));
    assert_non_null(strstr(text, "sent SIGUSR1 to group"));
    assert_non_null(strstr(text, "self-fencing: checkpoint grace over: sent SIGTERM"));
    free(text);
    text = read_in(f.dir, "tasks/1920-0.1.0.exit");
    assert_non_null(text);
    assert_non_null(strstr(text, "\"fenced\":true"));
    free(text);
    /* The lease is in the record, for the shims and the next run. */
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", f.dir), 0);
    lease = wrk_lease_new(path, false, &err);
    if (!lease)
        fail_msg("%s", err.msg);
    wrk_lease_read(lease, &lease_s, &until);
    assert_int_equal(lease_s, 2);
    assert_true(until != 0 && until <= mu_time_mono_ms());
    wrk_lease_free(lease);
    fake_sched_stop(&f);
}

/* Turns the agent's loop for ms, taking (and dropping) what it sends. */
static void agent_turn(struct fake_sched *f, int ms)
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
static void expect_ack(struct fake_sched *f, const char *job, struct proto_msg *m)
{
    for (;;) {
        if (!expect_msg(f, PROTO_BIND_ACK, m, 5000))
            fail_msg("no BIND_ACK for %s", job);
        if (strcmp(m->task.job, job) == 0)
            return;
        proto_msg_release(m);
    }
}

/* A BIND of job's task 0 stamped sent_ms (the fake scheduler's clock is ours) and expires_ms. */
static void send_bind_stamped(
    struct fake_sched *f, const char *job, int attempt, uint64_t sent_ms, uint64_t expires_ms)
{
    const char *argv[] = { "/bin/sh", "-c", "echo ran" };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.attempt = attempt;
    m.sent_ms = sent_ms;
    m.expires_ms = expires_ms;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

/* The BIND of job was refused for the node's sake with an error holding want; nothing ran. */
static void expect_refused(struct fake_sched *f, const char *job, int attempt, const char *want)
{
    struct proto_msg m;
    char name[128];
    char *text;

    expect_ack(f, job, &m);
    if (m.ok)
        fail_msg("BIND of %s started; want a refusal with '%s'", job, want);
    if (!strstr(m.error, want))
        fail_msg("BIND of %s refused with '%s'; want '%s'", job, m.error, want);
    assert_true(m.node_fault);
    assert_int_equal(m.task.state, 0);
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(name, sizeof(name), "tasks/%s.%d.0.json", job, attempt), 0);
    text = read_in(f->dir, name);
    assert_null(text);
    assert_int_equal(mu_snprintf(name, sizeof(name), "logs/%s.%d.0.out", job, attempt), 0);
    text = read_in(f->dir, name);
    assert_null(text);
}

static void expect_started(struct fake_sched *f, const char *job)
{
    struct proto_msg m;
    expect_ack(f, job, &m);
    if (!m.ok)
        fail_msg("BIND of %s refused: %s", job, m.error);
    proto_msg_release(&m);
}

static void test_agent_lease_binds(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct proto_msg hb;
    uint64_t hello_echo;
    uint64_t answered;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    hello_echo = m.echo_ms;
    assert_true(hello_echo > 0 && hello_echo <= mu_time_mono_ms());
    proto_msg_release(&m);
    /* Heartbeats carry the echo too. */
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 3000));
    assert_true(m.echo_ms > hello_echo);
    proto_msg_release(&m);

    /* The lease holds: a BIND starts. */
    send_bind_stamped(&f, "1940-0", 1, 0, 0);
    expect_started(&f, "1940-0");

    /* The scheduler falls silent past the 2 s lease; an old answer (the HELLO's echo, long
     * since renewed over) arrives, as one that sat in a socket: it renews nothing. */
    f.answer_lease_s = 0;
    answered = f.last_echo_ms;
    while (mu_time_mono_ms() < answered + 2200)
        agent_turn(&f, 50);
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.ok = true;
    hb.heartbeat_s = 1;
    hb.lease_s = 2;
    hb.echo_ms = hello_echo;
    send_to_worker(&f, &hb, 5);
    proto_msg_release(&hb);
    send_bind_stamped(&f, "1941-0", 1, 0, 0);
    expect_refused(&f, "1941-0", 1, "not started: this node's lease ran out ");
    {
        /* "... ran out 0.4 s ago (no word from the scheduler)" */
        send_bind_stamped(&f, "1942-0", 1, 0, 0);
        expect_ack(&f, "1942-0", &m);
        assert_false(m.ok);
        assert_non_null(strstr(m.error, " s ago (no word from the scheduler)"));
        proto_msg_release(&m);
    }

    /* A fresh answer renews it: BINDs start again. */
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 5000));
    proto_msg_release(&m);
    agent_turn(&f, 50);
    send_bind_stamped(&f, "1943-0", 1, 0, 0);
    expect_started(&f, "1943-0");
    fake_sched_stop(&f);
}

static void test_agent_stale_binds(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct proto_msg hb;
    char paths[8][PROTO_PATH_MAX];
    uint64_t now;
    int64_t ago = 0;
    const char *p;
    char *text;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 5;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);

    /* A BIND whose own stamps show it expired before it was sent. */
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1950-0", 1, now, now - 812);
    expect_ack(&f, "1950-0", &m);
    assert_false(m.ok);
    assert_true(m.node_fault);
    p = strstr(m.error, "stale BIND: the scheduler gave this attempt up ");
    if (!p)
        fail_msg("refused with '%s'", m.error);
    assert_non_null(strstr(m.error, " ms ago (expires_ms)"));
    assert_true(sscanf(m.error, "stale BIND: the scheduler gave this attempt up %" SCNd64, &ago)
                == 1);
    assert_true(ago >= 812);
    proto_msg_release(&m);

    /* A backlog: a fresh message shows the scheduler's clock, then a BIND stamped 5 s ago that
     * expired 4 s ago (it sat in a socket while the worker was frozen) is stale by that bound. */
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.ok = true;
    hb.heartbeat_s = 1;
    hb.sent_ms = mu_time_mono_ms();
    send_to_worker(&f, &hb, 5);
    proto_msg_release(&hb);
    agent_turn(&f, 50);
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1951-0", 1, now - 5000, now - 4000);
    expect_refused(&f, "1951-0", 1, "stale BIND: the scheduler gave this attempt up ");
    /* One that has not expired starts (with that expiry as its start deadline) and runs. */
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1952-0", 1, now, now + 30000);
    expect_started(&f, "1952-0");
    (void)until_exit(&f, "1952-0", paths, 8, &m);
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    text = read_in(f.dir, "logs/1952-0.1.0.out");
    assert_non_null(text);
    assert_string_equal(text, "ran\n");
    free(text);

    /* A KILL of a task the worker does not know, then its BIND: not started. */
    send_simple(&f, PROTO_KILL, "1953-0", 0, 1, 0, 0, 5);
    (void)until_exit(&f, "1953-0", paths, 8, &m);
    assert_int_equal(m.task.state, PROTO_TASK_LOST);
    proto_msg_release(&m);
    send_bind_stamped(&f, "1953-0", 1, 0, 0);
    expect_refused(&f, "1953-0", 1, "not started: a KILL for this task arrived first");
    /* Another attempt of that task is not touched by it. */
    send_bind_stamped(&f, "1953-0", 2, 0, 0);
    expect_started(&f, "1953-0");

    /* An exit acknowledged by its KILL leaves a tombstone too: a late repeat of the BIND does
     * not run the task a second time. */
    send_simple(&f, PROTO_KILL, "1952-0", 0, 1, 0, 0, 5);
    agent_turn(&f, 100);
    send_bind_stamped(&f, "1952-0", 1, 0, 0);
    expect_ack(&f, "1952-0", &m);
    assert_false(m.ok);
    assert_string_equal(m.error, "not started: a KILL for this task arrived first");
    proto_msg_release(&m);
    fake_sched_stop(&f);
}

static void test_shim_fences_without_worker(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct wrk_taskexit x;
    struct wrk_taskrec rec;
    struct mu_err err;
    char exit_path[1100];
    char rec_path[1100];
    char *text;
    int pid;
    int r = 0;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_bind_fenceable(&f, "1960-0");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    pid = m.task.pid;
    proto_msg_release(&m);
    assert_true(wait_log(&f, "1960-0.1.0.out", "ready\n"));

    /* The worker dies (no shutdown) and stays down: nobody renews the lease, and the shim stops
     * its task by itself: the checkpoint signal, then SIGTERM after the grace. */
    wrk_agent_free(f.agent);
    f.agent = NULL;
    assert_int_equal(mu_snprintf(exit_path, sizeof(exit_path), "%s/tasks/1960-0.1.0.exit", f.dir),
                     0);
    for (int i = 0; i < 1000 && r == 0; i++) {
        r = wrk_taskexit_read(exit_path, &x, &err);
        if (r == 0)
            sleep_ms(20);
    }
    if (r != 1)
        fail_msg("no exit file after 20 s: %s", r < 0 ? err.msg : "absent");
    assert_true(x.fenced);
    assert_int_equal(x.exit_code, 7);
    text = read_in(f.dir, "logs/1960-0.1.0.out");
    assert_non_null(text);
    assert_string_equal(text, "ready\nusr1\nterm\n");
    free(text);
    text = read_in(f.dir, "logs/1960-0.1.0.err");
    assert_non_null(text);
    assert_non_null(strstr(text, "self-fencing: the node's lease ran out"));
    assert_non_null(strstr(text, "self-fencing: checkpoint grace over: sent SIGTERM"));
    free(text);
    assert_true(kill(pid, 0) != 0); /* reaped by its shim */
    /* The shim was this process's child (the agent ran here): reap it. */
    assert_int_equal(mu_snprintf(rec_path, sizeof(rec_path), "%s/tasks/1960-0.1.0.json", f.dir), 0);
    assert_int_equal(wrk_taskrec_read(rec_path, &rec, &err), 1);
    {
        int status;
        assert_int_equal(wait_exit((pid_t)rec.shim_pid, &status), 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    fake_sched_stop(&f);
}

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
        cmocka_unit_test(test_csv_samples),
        cmocka_unit_test(test_csv_inline),
        cmocka_unit_test(test_csv_bad),
        cmocka_unit_test(test_csv_too_many),
        cmocka_unit_test(test_topo_samples),
        cmocka_unit_test(test_topo_bad),
        cmocka_unit_test(test_topo_limits),
        cmocka_unit_test(test_gpu_islands_parse),
        cmocka_unit_test(test_gpus_simulate_and_visible),
        cmocka_unit_test(test_gpus_discover),
        cmocka_unit_test(test_topo_discover),
        cmocka_unit_test(test_topo_discover_failures),
        cmocka_unit_test(test_spawn_capture),
        cmocka_unit_test(test_env_build),
        cmocka_unit_test(test_launch_exit_code),
        cmocka_unit_test(test_launch_kill_group),
        cmocka_unit_test(test_launch_failures),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_agent_protocol),
        cmocka_unit_test(test_agent_reregisters),
        cmocka_unit_test(test_agent_islands),
        cmocka_unit_test(test_ckpt_parse),
        cmocka_unit_test(test_ckpt_read),
        cmocka_unit_test(test_imds_parse_action),
        cmocka_unit_test(test_imds_parse_rebalance),
        cmocka_unit_test_teardown(test_imds_watcher, mock_teardown),
        cmocka_unit_test(test_agent_checkpoints),
        cmocka_unit_test_teardown(test_agent_spot, mock_teardown),
        cmocka_unit_test(test_taskrec_roundtrip),
        cmocka_unit_test(test_taskrec_bad),
        cmocka_unit_test(test_taskexit),
        cmocka_unit_test(test_taskrec_files),
        cmocka_unit_test(test_shim_spec),
        cmocka_unit_test(test_shim_cmdline),
        cmocka_unit_test(test_agent_restart),
        cmocka_unit_test(test_agent_shim_survives_group_kill),
        cmocka_unit_test(test_agent_fence),
        cmocka_unit_test(test_agent_lease_binds),
        cmocka_unit_test(test_agent_stale_binds),
        cmocka_unit_test(test_shim_fences_without_worker),
        cmocka_unit_test(test_agent_identity),
    };
    /* WRK_TEST_FILTER=test_imds* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

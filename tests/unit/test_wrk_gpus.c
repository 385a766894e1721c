/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the worker's GPU inventory (worker/gpus.c, worker/topo.c): the nvidia-smi CSV
 * parser on captured samples of four EC2 GPU instance types and a bad-input table, the
 * `nvidia-smi topo -m` matrix parser on NVSwitch, hybrid-cube-mesh, NVLink-pair and PCIe-only
 * boxes with its own bad-input table, the --gpu-islands list, CUDA_VISIBLE_DEVICES, and GPU and
 * island discovery through stand-in nvidia-smi scripts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

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

/* ---- discovery through stand-in programs ---- */

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

/* ---- MIG slices: nvidia-smi -L and --mig (issue #17) ---- */

/* The CSV sample csv into gpus, then the -L sample list on top; returns the entry count. */
static int mig_sample(const char *csv, const char *list, struct proto_gpu *gpus)
{
    struct mu_err err;
    char *text = read_data(csv);
    char *ltext = read_data(list);
    int n = -1;
    int total = -1;
    if (wrk_gpus_parse_csv(text, gpus, PROTO_MAX_GPUS, &n, &err) != 0)
        fail_msg("%s: %s", csv, err.msg);
    if (wrk_gpus_parse_mig(ltext, gpus, n, PROTO_MAX_GPUS, &total, &err) != 0)
        fail_msg("%s: %s", list, err.msg);
    free(text);
    free(ltext);
    return total;
}

static void test_mig_samples(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    (void)state;

    /* R470+ padding, mixed MIG and whole GPUs on one node, a compute-instance profile, +me. */
    assert_int_equal(mig_sample("p5.48xlarge.csv", "nvsmi-L-p5.48xlarge-mig.txt", gpus), 21);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(gpus[i].mig, i < 4);
        assert_string_equal(gpus[i].profile, "");
    }
    for (int i = 8; i < 21; i++) {
        assert_int_equal(gpus[i].index, i);
        assert_true(strncmp(gpus[i].uuid, "MIG-", 4) == 0);
        assert_string_equal(gpus[i].model, "NVIDIA H100 80GB HBM3");
    }
    assert_string_equal(gpus[8].uuid, "MIG-2d1c1a7b-5a8e-5b1f-9d36-0a3c1e5f6b01");
    assert_string_equal(gpus[8].profile, "1g.10gb");
    assert_int_equal(gpus[8].parent, 0);
    assert_int_equal(gpus[8].memory_mb, 10240);
    assert_string_equal(gpus[8].pci_bus_id, "00000000:53:00.0");
    assert_string_equal(gpus[14].profile, "1g.10gb");
    assert_int_equal(gpus[14].parent, 0);
    assert_string_equal(gpus[15].profile, "3g.40gb");
    assert_int_equal(gpus[15].parent, 1);
    assert_string_equal(gpus[15].uuid, "MIG-b3061c09-2a4c-5026-a575-79f86a5bb12c");
    assert_string_equal(gpus[17].profile, "1g.10gb");
    assert_int_equal(gpus[17].parent, 1);
    assert_string_equal(gpus[18].profile, "1c.3g.40gb");
    assert_int_equal(gpus[19].parent, 2);
    assert_string_equal(gpus[20].profile, "1g.10gb+me");
    assert_int_equal(gpus[20].parent, 3);

    /* R450/R460: one space of padding and "MIG-GPU-<uuid>/GI/CI" UUIDs. */
    assert_int_equal(mig_sample("p4d.24xlarge.csv", "nvsmi-L-p4d.24xlarge-r460.txt", gpus), 13);
    assert_true(gpus[0].mig && gpus[1].mig && !gpus[2].mig);
    assert_string_equal(gpus[8].uuid, "MIG-GPU-0fd630f1-f29d-0da9-953f-48f1a09f76b5/1/0");
    assert_string_equal(gpus[8].profile, "1c.3g.20gb");
    assert_int_equal(gpus[8].memory_mb, 20480);
    assert_string_equal(gpus[12].uuid, "MIG-GPU-0cb1e29c-658c-da14-95e6-0af593bd04cf/13/0");
    assert_string_equal(gpus[12].profile, "1g.5gb");
    assert_int_equal(gpus[12].parent, 1);

    /* No MIG anywhere: every GPU stays whole. */
    assert_int_equal(mig_sample("p5.48xlarge.csv", "nvsmi-L-p5.48xlarge-whole.txt", gpus), 8);
    for (int i = 0; i < 8; i++)
        assert_false(gpus[i].mig);
}

static void test_mig_inline(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    int n = -1;
    (void)state;

    /* CRLF, tabs, a blank line, trailing blanks. */
    wrk_gpus_simulate(gpus, 2, NULL);
    mu_strlcpy(gpus[1].uuid, "GPU-1111", sizeof(gpus[1].uuid));
    assert_int_equal(wrk_gpus_parse_mig("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-0000)\r\n"
                                        "\tMIG 3g.40gb\tDevice\t0: (UUID: MIG-aa)  \r\n"
                                        "\r\n"
                                        "GPU 1: NVIDIA A100 (rev 2) (UUID: GPU-1111)\r\n"
                                        "  MIG 7g.80gb     Device  0: (UUID: MIG-bb)\r\n",
                                        gpus, 2, PROTO_MAX_GPUS, &n, &err),
                     0);
    assert_int_equal(n, 4);
    assert_string_equal(gpus[2].uuid, "MIG-aa");
    assert_string_equal(gpus[3].profile, "7g.80gb");
    assert_int_equal(gpus[3].parent, 1);
    /* No room for a slice. */
    wrk_gpus_simulate(gpus, 2, NULL);
    assert_int_equal(wrk_gpus_parse_mig("GPU 0: X (UUID: GPU-0)\n"
                                        "  MIG 1g.10gb Device 0: (UUID: MIG-1)\n",
                                        gpus, 2, 2, &n, &err),
                     -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

static void test_mig_bad(void **state)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        { "  MIG 1g.10gb Device 0: (UUID: MIG-1)\n", "line 1: a MIG device before any GPU line" },
        { "hello\n", "line 1: expected 'GPU N: ...' or an indented 'MIG PROFILE Device N: ...'" },
        { "GPU 0: X (UUID: GPU-0)\nMIG 1g.10gb Device 0: (UUID: MIG-1)\n",
          "line 2: expected 'GPU N: ...' or an indented 'MIG PROFILE Device N: ...'" },
        { "GPU 9: X (UUID: GPU-9)\n", "line 1: GPU 9 is not in the GPU query" },
        { "GPU x: X (UUID: GPU-0)\n", "line 1: GPU index: expected 0..63, got 'x'" },
        { "GPU 0: X\n", "line 1: GPU 0: expected '(UUID: GPU-...)' at the end" },
        { "GPU 0: X (UUID: GPU-0)\n  MIG 3gb Device 0: (UUID: MIG-1)\n",
          "line 2: '3gb' is not a MIG profile (e.g. 3g.40gb)" },
        { "GPU 0: X (UUID: GPU-0)\n  MIG 1g.10gb Dev 0: (UUID: MIG-1)\n",
          "line 2: expected 'Device N:' after the profile" },
        { "GPU 0: X (UUID: GPU-0)\n  MIG 1g.10gb Device 0: (UUID: GPU-1)\n",
          "line 2: expected '(UUID: MIG-...)' after 'Device 0:'" },
        { "GPU 0: X (UUID: GPU-0)\n  MIG 1g.10gb Device 0: (UUID: MIG-1)\n"
          "  MIG 1g.10gb Device 1: (UUID: MIG-1)\n",
          "line 3: MIG device MIG-1 listed twice" },
        { "GPU 0: X (UUID: GPU-0)\nGPU 0: X (UUID: GPU-0)\n  MIG 1g.10gb Device 0: (UUID: MIG-1)\n"
          "GPU 0: X (UUID: GPU-0)\n",
          "line 4: GPU 0 listed twice" },
        { "GPU 1: X (UUID: GPU-other)\n", "line 1: GPU 1 has UUID GPU-other here but GPU-1 in the "
                                          "GPU query" },
    };
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        struct proto_gpu gpus[PROTO_MAX_GPUS];
        struct mu_err err;
        int n = -1;
        wrk_gpus_simulate(gpus, 2, NULL);
        mu_strlcpy(gpus[1].uuid, "GPU-1", sizeof(gpus[1].uuid));
        if (wrk_gpus_parse_mig(cases[i].text, gpus, 2, PROTO_MAX_GPUS, &n, &err) != -1)
            fail_msg("case %zu parsed", i);
        assert_int_equal(err.code, MU_E_PARSE);
        if (strcmp(err.msg, cases[i].msg) != 0)
            fail_msg("case %zu: '%s', expected '%s'", i, err.msg, cases[i].msg);
        assert_int_equal(n, -1);
    }
}

static void test_mig_simulate_and_visible(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char buf[512];
    int n = -1;
    (void)state;

    wrk_gpus_simulate(gpus, 4, NULL);
    assert_int_equal(
        wrk_gpus_simulate_mig("7x1g.10gb,-,2x3g.40gb+1x1g.10gb", gpus, 4, PROTO_MAX_GPUS, &n, &err),
        0);
    assert_int_equal(n, 4 + 7 + 3);
    assert_true(gpus[0].mig && !gpus[1].mig && gpus[2].mig && !gpus[3].mig);
    assert_string_equal(gpus[4].uuid, "MIG-sim-0-0");
    assert_string_equal(gpus[11].profile, "3g.40gb");
    assert_int_equal(gpus[11].parent, 2);
    assert_string_equal(gpus[13].profile, "1g.10gb");
    assert_int_equal(gpus[13].index, 13);
    wrk_gpus_simulate(gpus, 2, NULL);
    assert_int_equal(
        wrk_gpus_simulate_mig("1x1g.10gb+me+2x2g.20gb", gpus, 2, PROTO_MAX_GPUS, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_string_equal(gpus[2].profile, "1g.10gb+me");
    assert_string_equal(gpus[4].profile, "2g.20gb");
    wrk_gpus_simulate(gpus, 4, NULL);
    assert_int_equal(
        wrk_gpus_simulate_mig("7x1g.10gb,-,2x3g.40gb+1x1g.10gb", gpus, 4, PROTO_MAX_GPUS, &n, &err),
        0);
    {
        int bind[2] = { 11, 4 };
        int whole[1] = { 1 };
        int parent[1] = { 0 };
        assert_int_equal(wrk_gpus_format_visible(gpus, n, true, bind, 2, buf, sizeof(buf), &err),
                         0);
        assert_string_equal(buf, "MIG-sim-2-7,MIG-sim-0-0");
        assert_int_equal(wrk_gpus_format_visible(gpus, n, true, whole, 1, buf, sizeof(buf), &err),
                         0);
        assert_string_equal(buf, "1");
        assert_int_equal(wrk_gpus_format_visible(gpus, n, true, parent, 1, buf, sizeof(buf), &err),
                         -1);
        assert_string_equal(err.msg, "gpu 0 is in MIG mode: only its slices are bound");
    }
    static const char *const bad[] = { "",          "7x1g.10gb,", ",-",        "8x1g.10gb",
                                       "1g.10gb",   "1x10gb",     "-,-,-,-,-", "7x1g.10gb,,-",
                                       "0x1g.10gb", "7x1g.10gb+" };
    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        wrk_gpus_simulate(gpus, 4, NULL);
        if (wrk_gpus_simulate_mig(bad[i], gpus, 4, PROTO_MAX_GPUS, &n, &err) == 0)
            fail_msg("--mig '%s' accepted", bad[i]);
    }
    /* 64 entries at most: 8 GPUs of 7 slices is 64. */
    wrk_gpus_simulate(gpus, 8, NULL);
    assert_int_equal(wrk_gpus_simulate_mig("7x1g.10gb,7x1g.10gb,7x1g.10gb,7x1g.10gb,7x1g.10gb,"
                                           "7x1g.10gb,7x1g.10gb,7x1g.10gb",
                                           gpus, 8, PROTO_MAX_GPUS, &n, &err),
                     0);
    assert_int_equal(n, 64);
    wrk_gpus_simulate(gpus, 9, NULL);
    assert_int_equal(wrk_gpus_simulate_mig("7x1g.10gb,7x1g.10gb,7x1g.10gb,7x1g.10gb,7x1g.10gb,"
                                           "7x1g.10gb,7x1g.10gb,7x1g.10gb",
                                           gpus, 9, PROTO_MAX_GPUS, &n, &err),
                     -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

/* Discovery: a stand-in nvidia-smi for -L; a failing one leaves the GPUs to the caller. */
static void test_mig_discover(void **state)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    char *dir = make_tmpdir();
    char sample[1024];
    char script[1024];
    char prog[1024];
    char *csv = read_data("p5.48xlarge.csv");
    int n = -1;
    int total = -1;
    (void)state;

    assert_int_equal(wrk_gpus_parse_csv(csv, gpus, PROTO_MAX_GPUS, &n, &err), 0);
    free(csv);
    data_path("nvsmi-L-p5.48xlarge-mig.txt", sample, sizeof(sample));
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "#!/bin/sh\n[ \"$1\" = -L ] && [ $# -eq 1 ] || exit 7\ncat '%s'\n",
                                 sample),
                     0);
    assert_int_equal(mu_snprintf(prog, sizeof(prog), "%s/nvidia-smi-L", dir), 0);
    write_file(prog, script, 0755);
    if (wrk_mig_discover(prog, gpus, n, PROTO_MAX_GPUS, &total, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(total, 21);
    write_file(prog, "#!/bin/sh\necho 'GPU 0: X (UUID: GPU-nope)'\n", 0755);
    assert_int_equal(wrk_mig_discover(prog, gpus, n, PROTO_MAX_GPUS, &total, &err), -1);
    assert_non_null(strstr(err.msg, "-L' output: line 1: GPU 0 has UUID GPU-nope"));
    rm_rf(dir);
    free(dir);
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
        cmocka_unit_test(test_mig_samples),
        cmocka_unit_test(test_mig_inline),
        cmocka_unit_test(test_mig_bad),
        cmocka_unit_test(test_mig_simulate_and_visible),
        cmocka_unit_test(test_mig_discover),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * GPU inventory (docs/design.md §2 "Node", §8 --gpus): simulated GPUs, or discovery through
 * nvidia-smi's CSV query.  nvidia-smi is run as a program, never through a shell, and its output is
 * parsed strictly: a GPU the scheduler would place work on must have an index, a UUID, a model, a
 * memory size and a bus id, so "[N/A]" or a missing column is an error that names the line,
 * not a GPU with zero memory.  The first two and the last two fields are fixed, so a model name
 * with a comma would still parse.  The CSV carries no topology: the islands come from a second
 * run, `nvidia-smi topo -m`, through the same capture helper (the matrix parser is topo.c).
 */
#include "worker/wrk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/mu_banned.h"

#define GPU_FIELDS   5
#define GPU_LINE_MAX 1024

static const char *const nvsmi_query = "--query-gpu=index,uuid,name,memory.total,pci.bus_id";

/* Trims blanks (and a CR) at both ends of s in place; returns the new start. */
static char *trim(char *s)
{
    size_t len = strlen(s);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'))
        s[--len] = '\0';
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static bool is_printable(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* Parses one line (already cut out and NUL-terminated) into g. */
static int parse_line(char *line, int lineno, struct proto_gpu *g, struct mu_err *err)
{
    char *field[GPU_FIELDS];
    char *commas[GPU_LINE_MAX];
    int ncommas = 0;
    int64_t v;

    for (char *p = line; *p; p++) {
        if (*p == ',')
            commas[ncommas++] = p;
    }
    if (ncommas < GPU_FIELDS - 1)
        return mu_errf(err, MU_E_PARSE,
                       "line %d: expected %d comma-separated fields (index, uuid, name, "
                       "memory.total, pci.bus_id), got %d",
                       lineno, GPU_FIELDS, ncommas + 1);
    /* index, uuid | name (may hold commas) | memory.total, pci.bus_id */
    *commas[0] = '\0';
    *commas[1] = '\0';
    *commas[ncommas - 2] = '\0';
    *commas[ncommas - 1] = '\0';
    field[0] = trim(line);
    field[1] = trim(commas[0] + 1);
    field[2] = trim(commas[1] + 1);
    field[3] = trim(commas[ncommas - 2] + 1);
    field[4] = trim(commas[ncommas - 1] + 1);

    memset(g, 0, sizeof(*g));
    if (mu_parse_i64(field[0], 0, PROTO_MAX_GPUS - 1, &v, NULL) != 0)
        return mu_errf(err, MU_E_PARSE, "line %d: index: expected 0..%d, got '%s'", lineno,
                       PROTO_MAX_GPUS - 1, field[0]);
    g->index = (int)v;
    if (!mu_name_is_valid(field[1], sizeof(g->uuid) - 1))
        return mu_errf(err, MU_E_PARSE, "line %d: uuid: expected a GPU UUID, got '%s'", lineno,
                       field[1]);
    mu_strlcpy(g->uuid, field[1], sizeof(g->uuid));
    if (field[2][0] == '\0' || !is_printable(field[2]) || field[2][0] == '['
        || strlen(field[2]) >= sizeof(g->model))
        return mu_errf(err, MU_E_PARSE, "line %d: name: expected a GPU model, got '%s'", lineno,
                       field[2]);
    mu_strlcpy(g->model, field[2], sizeof(g->model));
    if (mu_parse_i64(field[3], 1, INT64_C(1) << 24, &v, NULL) != 0)
        return mu_errf(err, MU_E_PARSE, "line %d: memory.total: expected MiB, got '%s'", lineno,
                       field[3]);
    g->memory_mb = v;
    if (!mu_name_is_valid(field[4], sizeof(g->pci_bus_id) - 1))
        return mu_errf(err, MU_E_PARSE, "line %d: pci.bus_id: expected a PCI bus id, got '%s'",
                       lineno, field[4]);
    mu_strlcpy(g->pci_bus_id, field[4], sizeof(g->pci_bus_id));
    g->island = 0;
    return 0;
}

int wrk_gpus_parse_csv(
    const char *text, struct proto_gpu *gpus, int max, int *n_out, struct mu_err *err)
{
    char line[GPU_LINE_MAX];
    struct mu_lines it;
    int n = 0;
    int got;

    if (!text)
        return mu_errf(err, MU_E_INVAL, "no nvidia-smi output");
    mu_lines_init(&it, text);
    while ((got = mu_lines_copy(&it, line, sizeof(line), err)) > 0) {
        int lineno = it.lineno;
        char *start = trim(line);

        if (n >= max)
            return mu_errf(err, MU_E_TOOBIG, "line %d: more than %d GPUs", lineno, max);
        if (parse_line(start, lineno, &gpus[n], err) != 0)
            return -1;
        for (int i = 0; i < n; i++) {
            if (gpus[i].index == gpus[n].index)
                return mu_errf(err, MU_E_PARSE, "line %d: index %d appears twice", lineno,
                               gpus[n].index);
        }
        n++;
    }
    if (got < 0)
        return -1;
    if (n == 0)
        return mu_errf(err, MU_E_NOTFOUND, "nvidia-smi reported no GPUs");
    *n_out = n;
    return 0;
}

void wrk_gpus_simulate(struct proto_gpu *gpus, int n, const int *island)
{
    for (int i = 0; i < n; i++) {
        memset(&gpus[i], 0, sizeof(gpus[i]));
        gpus[i].index = i;
        mu_strlcpy(gpus[i].model, "simulated", sizeof(gpus[i].model));
        gpus[i].island = island ? island[i] : 0;
    }
}

/* The first non-empty line of s, trimmed, into buf. */
static void first_line(const char *s, char *buf, size_t size)
{
    struct mu_lines it;
    const char *line;
    size_t len;

    buf[0] = '\0';
    mu_lines_init(&it, s);
    while (mu_lines_next(&it, &line, &len)) {
        if (len > 0) {
            char tmp[512];
            size_t n = len < sizeof(tmp) - 1 ? len : sizeof(tmp) - 1;
            memcpy(tmp, line, n);
            tmp[n] = '\0';
            mu_strlcpy(buf, trim(tmp), size);
            if (buf[0])
                return;
        }
    }
}

/*
 * Runs argv (argv[0] = program) to completion and hands back its stdout (free() it).  A missing
 * program gets the --gpus hint; a non-zero exit carries the first line of stderr (or stdout).
 */
static int nvsmi_run(char *const *argv, char **out_ret, struct mu_err *err)
{
    const char *program = argv[0];
    char *out = NULL;
    char *errout = NULL;
    int status = 0;
    int rc = -1;
    char why[256];

    if (wrk_spawn_capture(argv, WRK_NVSMI_MAX_BYTES, WRK_NVSMI_TIMEOUT_MS, &out, &errout, &status,
                          err)
        != 0) {
        if (err && err->code == MU_E_NOTFOUND) {
            /* Keep the message on one line: it is also what the daemon prints before exit 1. */
            char msg[sizeof(err->msg)];
            mu_strlcpy(msg, err->msg, sizeof(msg));
            mu_errf(err, MU_E_NOTFOUND, "%s; hint: pass --gpus N to simulate GPUs", msg);
        }
        goto out;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        first_line(errout, why, sizeof(why));
        if (!why[0])
            first_line(out, why, sizeof(why));
        if (WIFEXITED(status))
            mu_errf(err, MU_E_IO, "'%s' exited with status %d: %s", program, WEXITSTATUS(status),
                    why[0] ? why : "(no output)");
        else
            mu_errf(err, MU_E_IO, "'%s' killed by %s: %s", program,
                    mu_signal_name(WTERMSIG(status)), why[0] ? why : "(no output)");
        goto out;
    }
    *out_ret = out;
    out = NULL;
    rc = 0;
out:
    free(out);
    free(errout);
    return rc;
}

int wrk_gpus_discover(
    const char *program, struct proto_gpu *gpus, int max, int *n_out, struct mu_err *err)
{
    char *out = NULL;
    int rc = -1;
    char *argv[4];

    if (!program)
        program = "nvidia-smi";
    argv[0] = (char *)program;
    argv[1] = (char *)nvsmi_query;
    argv[2] = (char *)"--format=csv,noheader,nounits";
    argv[3] = NULL;
    if (nvsmi_run(argv, &out, err) != 0)
        goto out;
    if (wrk_gpus_parse_csv(out, gpus, max, n_out, err) != 0) {
        mu_err_prefix(err, "'%s' output: ", program);
        goto out;
    }
    rc = 0;
out:
    free(out);
    return rc;
}

int wrk_topo_discover(
    const char *program, struct proto_gpu *gpus, int ngpus, int *nislands_out, struct mu_err *err)
{
    char *out = NULL;
    int island[PROTO_MAX_GPUS];
    int nislands = 0;
    int rc = -1;
    char *argv[4];

    if (!program)
        program = "nvidia-smi";
    if (ngpus < 1 || ngpus > PROTO_MAX_GPUS)
        return mu_errf(err, MU_E_INVAL, "%d GPUs: expected 1..%d", ngpus, PROTO_MAX_GPUS);
    argv[0] = (char *)program;
    argv[1] = (char *)"topo";
    argv[2] = (char *)"-m";
    argv[3] = NULL;
    if (nvsmi_run(argv, &out, err) != 0)
        goto out;
    if (wrk_topo_parse(out, ngpus, island, &nislands, err) != 0) {
        mu_err_prefix(err, "'%s topo -m' output: ", program);
        goto out;
    }
    /* The matrix rows are nvidia-smi indices, as are the CSV's: unique, so a permutation. */
    for (int j = 0; j < ngpus; j++) {
        if (gpus[j].index < 0 || gpus[j].index >= ngpus) {
            mu_errf(err, MU_E_PARSE, "GPU index %d has no row in the %d-GPU topology matrix",
                    gpus[j].index, ngpus);
            goto out;
        }
    }
    for (int j = 0; j < ngpus; j++)
        gpus[j].island = island[gpus[j].index];
    if (nislands_out)
        *nislands_out = nislands;
    rc = 0;
out:
    free(out);
    return rc;
}

int wrk_mig_discover(
    const char *program, struct proto_gpu *gpus, int ngpus, int max, int *n_out, struct mu_err *err)
{
    char *out = NULL;
    int rc = -1;
    char *argv[3];

    if (!program)
        program = "nvidia-smi";
    argv[0] = (char *)program;
    argv[1] = (char *)"-L";
    argv[2] = NULL;
    if (nvsmi_run(argv, &out, err) != 0)
        goto out;
    if (wrk_gpus_parse_mig(out, gpus, ngpus, max, n_out, err) != 0) {
        mu_err_prefix(err, "'%s -L' output: ", program);
        goto out;
    }
    rc = 0;
out:
    free(out);
    return rc;
}

int wrk_gpus_format_visible(const struct proto_gpu *gpus,
                            int ngpus,
                            bool simulated,
                            const int *bind,
                            int nbind,
                            char *buf,
                            size_t size,
                            struct mu_err *err)
{
    size_t used = 0;

    if (size == 0)
        return mu_errf(err, MU_E_TOOBIG, "CUDA_VISIBLE_DEVICES: no room");
    buf[0] = '\0';
    for (int i = 0; i < nbind; i++) {
        const struct proto_gpu *g = NULL;
        int n;
        for (int j = 0; j < ngpus && !g; j++) {
            if (gpus[j].index == bind[i])
                g = &gpus[j];
        }
        if (!g)
            return mu_errf(err, MU_E_INVAL, "gpu %d is not on this node", bind[i]);
        for (int j = 0; j < i; j++) {
            if (bind[j] == bind[i])
                return mu_errf(err, MU_E_INVAL, "gpu %d is bound twice", bind[i]);
        }
        if (g->mig)
            return mu_errf(err, MU_E_INVAL, "gpu %d is in MIG mode: only its slices are bound",
                           bind[i]);
        /* A MIG slice by its MIG-… UUID, simulated or not; a simulated GPU by its index. */
        if (!g->profile[0] && (simulated || g->uuid[0] == '\0'))
            n = snprintf(buf + used, size - used, "%s%d", i ? "," : "", g->index);
        else
            n = snprintf(buf + used, size - used, "%s%s", i ? "," : "", g->uuid);
        if (n < 0 || (size_t)n >= size - used)
            return mu_errf(err, MU_E_TOOBIG, "CUDA_VISIBLE_DEVICES: longer than %zu bytes",
                           size - 1);
        used += (size_t)n;
    }
    return 0;
}

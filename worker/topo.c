/* SPDX-License-Identifier: MIT */
/*
 * NVLink islands (docs/design.md §2 "GPU islands", issue 3): the GPU matrix of `nvidia-smi topo
 * -m`, and the --gpu-islands list that lays out simulated GPUs.  GPUs joined by an NV# cell,
 * directly or through other GPUs, form one island: connected components, not cliques, because NCCL
 * routes over NVLink through a peer (p3.16xlarge's hybrid cube mesh is one island although its
 * GPU0-GPU5 cell is SYS).  Islands are numbered 0.. in the order of their lowest GPU, so that a
 * machine reports the same numbers on every start.
 *
 * The matrix is read strictly (a header naming GPU0..GPUn-1 in order, every GPU row once, every
 * cell a known link type, X exactly on the diagonal, NV# both ways), because a wrong island is
 * a silent slowdown where an error is a warning and one island.  What nvidia-smi varies is
 * tolerated: tabs or spaces, ANSI escapes (some drivers underline the header even into a pipe),
 * NIC rows and columns, the affinity columns, and everything from the blank line on (Legend).
 */
#include "worker/wrk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define BIT(i) (UINT64_C(1) << (i))

enum topo_link {
    TOPO_SELF = 1, /* "X" */
    TOPO_NVLINK,   /* "NV#": a bonded set of # NVLinks */
    TOPO_PCIE,     /* PIX, PXB, PHB, NODE, SYS, and SOC from older drivers */
};

/*
 * A copy of text without ANSI CSI sequences (ESC '[' parameters final-byte) or stray ESC bytes.
 * Free it with free().
 */
static char *strip_escapes(const char *text, struct mu_err *err)
{
    size_t len = strlen(text);
    char *out = calloc(len + 1, 1);
    size_t o = 0;

    if (!out) {
        mu_errf(err, MU_E_NOMEM, "out of memory for the topology matrix");
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\x1b') {
            if (text[i + 1] == '[') {
                i += 2;
                while (i < len && !(text[i] >= 0x40 && text[i] <= 0x7e))
                    i++;
            }
            continue;
        }
        out[o++] = text[i];
    }
    out[o] = '\0';
    return out;
}

/* Cuts the next blank-separated token out of *p (NUL-terminating it); NULL at the end. */
static char *next_token(char **p)
{
    char *s = *p;
    char *tok;

    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    if (*s == '\0') {
        *p = s;
        return NULL;
    }
    tok = s;
    while (*s && *s != ' ' && *s != '\t' && *s != '\r')
        s++;
    if (*s)
        *s++ = '\0';
    *p = s;
    return tok;
}

/* The n of "<prefix><n>" (decimal, no sign, no leading zero, at most 4 digits), else -1. */
static int device_index(const char *tok, const char *prefix)
{
    size_t plen = strlen(prefix);
    const char *d;
    size_t ndigits;
    int n = 0;

    /* The prefix first: a token shorter than it ends before tok + plen. */
    if (strncmp(tok, prefix, plen) != 0)
        return -1;
    d = tok + plen;
    ndigits = strlen(d);
    if (ndigits == 0 || ndigits > 4 || (d[0] == '0' && ndigits > 1))
        return -1;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return -1;
        n = n * 10 + (*d - '0');
    }
    return n;
}

/* The link type of one GPU-to-GPU cell, or -1 when it is none nvidia-smi prints. */
static int link_parse(const char *cell)
{
    static const char *const pcie[] = { "PIX", "PXB", "PHB", "NODE", "SYS", "SOC" };

    if (strcmp(cell, "X") == 0)
        return TOPO_SELF;
    if (strncmp(cell, "NV", 2) == 0) {
        int links = device_index(cell, "NV");
        return links >= 1 && links <= 999 ? TOPO_NVLINK : -1;
    }
    for (size_t i = 0; i < MU_ARRAY_LEN(pcie); i++) {
        if (strcmp(cell, pcie[i]) == 0)
            return TOPO_PCIE;
    }
    return -1;
}

/*
 * Reads the header's GPU columns, GPU0, GPU1, ... in order, which must be exactly ngpus: tok is
 * the line's first token, cur the rest of the line.
 */
static int parse_header(char *tok, char *cur, int lineno, int ngpus, struct mu_err *err)
{
    int ncols = 0;

    if (!tok || device_index(tok, "GPU") != 0)
        return mu_errf(err, MU_E_PARSE,
                       "line %d: expected the header row of 'nvidia-smi topo -m' (GPU0 GPU1 ...), "
                       "got '%.40s'",
                       lineno, tok ? tok : "");
    while (tok && device_index(tok, "GPU") == ncols) {
        if (ncols == PROTO_MAX_GPUS)
            return mu_errf(err, MU_E_TOOBIG, "line %d: more than %d GPU columns", lineno,
                           PROTO_MAX_GPUS);
        ncols++;
        tok = next_token(&cur);
    }
    if (tok && device_index(tok, "GPU") >= 0)
        return mu_errf(err, MU_E_PARSE, "line %d: column '%s' where GPU%d was expected", lineno,
                       tok, ncols);
    if (ncols != ngpus)
        return mu_errf(err, MU_E_PARSE, "line %d: the matrix has %d GPU%s, expected %d", lineno,
                       ncols, ncols == 1 ? "" : "s", ngpus);
    return 0;
}

/*
 * Reads one row: tok is its label (GPU<i> or NIC<i>), cur the rest of the line.  A GPU row's
 * cells go into nv[i] (bit j set: NV# to GPUj) and mark bit i of *seen; NIC rows are skipped.
 */
static int parse_row(
    char *tok, char *cur, int lineno, int ngpus, uint64_t *seen, uint64_t *nv, struct mu_err *err)
{
    int row;

    if (device_index(tok, "NIC") >= 0)
        return 0;
    row = device_index(tok, "GPU");
    if (row < 0)
        return mu_errf(err, MU_E_PARSE, "line %d: expected a GPU or NIC row, got '%.40s'", lineno,
                       tok);
    if (row >= ngpus)
        return mu_errf(err, MU_E_PARSE, "line %d: row 'GPU%d' is not in the header (GPU0..GPU%d)",
                       lineno, row, ngpus - 1);
    if (*seen & BIT(row))
        return mu_errf(err, MU_E_PARSE, "line %d: row 'GPU%d' appears twice", lineno, row);
    *seen |= BIT(row);
    for (int col = 0; col < ngpus; col++) {
        char *cell = next_token(&cur);
        int link;

        if (!cell)
            return mu_errf(err, MU_E_PARSE, "line %d: row GPU%d has %d GPU cells, expected %d",
                           lineno, row, col, ngpus);
        link = link_parse(cell);
        if (link < 0)
            return mu_errf(err, MU_E_PARSE,
                           "line %d: GPU%d-GPU%d: expected X, NV#, PIX, PXB, PHB, NODE or SYS, "
                           "got '%.16s'",
                           lineno, row, col, cell);
        if (col == row && link != TOPO_SELF)
            return mu_errf(err, MU_E_PARSE, "line %d: GPU%d-GPU%d: expected X, got '%s'", lineno,
                           row, col, cell);
        if (col != row && link == TOPO_SELF)
            return mu_errf(err, MU_E_PARSE, "line %d: GPU%d-GPU%d: X off the diagonal", lineno, row,
                           col);
        if (link == TOPO_NVLINK)
            nv[row] |= BIT(col);
    }
    return 0;
}

/* Every GPU row was read, and every NVLink cell has its mirror. */
static int check_matrix(int ngpus, uint64_t seen, const uint64_t *nv, struct mu_err *err)
{
    for (int i = 0; i < ngpus; i++) {
        if (!(seen & BIT(i)))
            return mu_errf(err, MU_E_PARSE, "row 'GPU%d' is missing", i);
        for (int j = 0; j < i; j++) {
            if (((nv[i] >> j) & 1) != ((nv[j] >> i) & 1))
                return mu_errf(err, MU_E_PARSE, "GPU%d-GPU%d: NVLink one way but not the other", j,
                               i);
        }
    }
    return 0;
}

/* Numbers the connected components of the NVLink graph in the order of their lowest GPU. */
static int number_islands(const uint64_t *nv, int ngpus, int *island)
{
    int stack[PROTO_MAX_GPUS];
    int nislands = 0;

    for (int i = 0; i < ngpus; i++)
        island[i] = -1;
    for (int i = 0; i < ngpus; i++) {
        int top = 0;
        if (island[i] >= 0)
            continue;
        island[i] = nislands;
        stack[top++] = i;
        while (top > 0) {
            int g = stack[--top];
            for (int j = 0; j < ngpus; j++) {
                if ((nv[g] & BIT(j)) && island[j] < 0) {
                    island[j] = nislands;
                    stack[top++] = j;
                }
            }
        }
        nislands++;
    }
    return nislands;
}

int wrk_topo_parse(
    const char *text, int ngpus, int *island_out, int *nislands_out, struct mu_err *err)
{
    char *copy = NULL;
    uint64_t nv[PROTO_MAX_GPUS];
    uint64_t seen = 0; /* bit i: the row of GPUi was read */
    int island[PROTO_MAX_GPUS];
    bool header = false;
    struct mu_lines it;
    const char *span;
    size_t len;
    int nislands;
    int rc = -1;

    if (!text)
        return mu_errf(err, MU_E_INVAL, "no 'nvidia-smi topo -m' output");
    if (ngpus < 1 || ngpus > PROTO_MAX_GPUS)
        return mu_errf(err, MU_E_INVAL, "%d GPUs: expected 1..%d", ngpus, PROTO_MAX_GPUS);
    copy = strip_escapes(text, err);
    if (!copy)
        return -1;
    memset(nv, 0, sizeof(nv));
    mu_lines_init(&it, copy);
    while (mu_lines_next(&it, &span, &len)) {
        int lineno = it.lineno;
        char *cur = copy + (span - copy); /* the line is ours to cut: it lies in copy */
        char *tok;

        cur[len] = '\0';
        tok = next_token(&cur);
        if (!header) {
            if (!tok)
                continue;
            if (parse_header(tok, cur, lineno, ngpus, err) != 0)
                goto out;
            header = true;
            continue;
        }
        /* The matrix ends at the blank line before the Legend. */
        if (!tok || strcmp(tok, "Legend:") == 0)
            break;
        if (parse_row(tok, cur, lineno, ngpus, &seen, nv, err) != 0)
            goto out;
    }
    if (!header) {
        mu_errf(err, MU_E_PARSE,
                "no GPU matrix: expected the output of 'nvidia-smi topo -m' (a header row "
                "GPU0 GPU1 ...)");
        goto out;
    }
    if (check_matrix(ngpus, seen, nv, err) != 0)
        goto out;
    nislands = number_islands(nv, ngpus, island);
    memcpy(island_out, island, (size_t)ngpus * sizeof(island[0]));
    if (nislands_out)
        *nislands_out = nislands;
    rc = 0;
out:
    free(copy);
    return rc;
}

int wrk_gpu_islands_parse(const char *text, int ngpus, int *island_out, struct mu_err *err)
{
    int island[PROTO_MAX_GPUS];
    int used = 0;
    int n = 0;
    const char *p = text;

    if (ngpus < 0 || ngpus > PROTO_MAX_GPUS)
        return mu_errf(err, MU_E_INVAL, "%d GPUs: expected 0..%d", ngpus, PROTO_MAX_GPUS);
    if (!text || !text[0])
        return mu_errf(err, MU_E_PARSE, "expected island sizes separated by commas, e.g. 4,4");
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[16];
        int64_t size;

        n++;
        if (len == 0 || len >= sizeof(item))
            return mu_errf(err, MU_E_PARSE, "island %d: expected a size in 1..%d, got '%.*s'", n,
                           PROTO_MAX_GPUS, (int)(len < 20 ? len : 20), p);
        memcpy(item, p, len);
        item[len] = '\0';
        if (mu_parse_i64(item, 1, PROTO_MAX_GPUS, &size, NULL) != 0)
            return mu_errf(err, MU_E_PARSE, "island %d: expected a size in 1..%d, got '%s'", n,
                           PROTO_MAX_GPUS, item);
        if (size > ngpus - used)
            return mu_errf(err, MU_E_RANGE, "island sizes add up to more than %d GPU%s", ngpus,
                           ngpus == 1 ? "" : "s");
        for (int64_t k = 0; k < size; k++)
            island[used++] = n - 1;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    if (used != ngpus)
        return mu_errf(err, MU_E_RANGE, "island sizes add up to %d GPU%s, expected %d", used,
                       used == 1 ? "" : "s", ngpus);
    memcpy(island_out, island, (size_t)ngpus * sizeof(island[0]));
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * MIG slices in the inventory (issue #17): `nvidia-smi -L` for discovered GPUs, --mig for
 * simulated ones.  A GPU in MIG mode stays in the inventory with `mig` set (the scheduler never
 * binds it whole) and each of its slices is appended after the GPUs as an entry of its own: the
 * slice's profile, its "MIG-…" UUID (what CUDA_VISIBLE_DEVICES takes), its GPU as `parent`, and
 * its position as index (protocol/README.md, "gpu map").  `nvidia-smi -L` is parsed strictly and
 * every error names the line; a GPU not in MIG mode lists no MIG lines and stays whole.
 *
 * The -L formats this reads (byte for byte in tests/data/wrk/nvsmi-L-*.txt):
 *
 *   GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-950792bf-a01c-3f1a-e122-3473e67f54b2)
 *     MIG 3g.40gb     Device  0: (UUID: MIG-b3061c09-2a4c-5026-a575-79f86a5bb12c)     R470 on
 *     MIG 1c.3g.20gb Device 0: (UUID: MIG-GPU-2fa5cf01-…/1/0)                         R450/R460
 *
 * The padding after the profile and before the device index varies; the profile may be a
 * compute-instance profile ("1c.3g.20gb") or carry a suffix ("1g.10gb+me").
 */
#include "worker/wrk.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define LINE_MAX_BYTES 1024

/* A MIG UUID: "MIG-" then [A-Za-z0-9-/] (the R450 form has slashes), at most 95 bytes. */
static bool mig_uuid_valid(const char *s)
{
    size_t n = strlen(s);
    if (n <= 4 || n >= sizeof(((struct proto_gpu *)NULL)->uuid) || strncmp(s, "MIG-", 4) != 0)
        return false;
    for (; *s; s++) {
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '/')
            return false;
    }
    return true;
}

/* Cuts "(UUID: X)" off the end of s: X into uuid; false when s does not end that way. */
static bool take_uuid(char *s, char *uuid, size_t size)
{
    size_t len = strlen(s);
    char *open;
    if (len < 2 || s[len - 1] != ')')
        return false;
    s[len - 1] = '\0';
    open = strstr(s, "(UUID: ");
    if (!open)
        return false;
    for (char *next = strstr(open + 1, "(UUID: "); next; next = strstr(next + 1, "(UUID: "))
        open = next; /* the last one: a model name could hold parentheses */
    if (mu_strlcpy(uuid, open + 7, size) >= size)
        return false;
    *open = '\0';
    return true;
}

static char *skip_blanks(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Memory of a profile "…Ng.Mgb…" in MiB (M * 1024), 0 when it does not say. */
static int64_t profile_memory_mb(const char *profile)
{
    const char *g = strstr(profile, "g.");
    int64_t v = 0;
    if (!g)
        return 0;
    for (g += 2; isdigit((unsigned char)*g) && v < 100000; g++)
        v = v * 10 + (*g - '0');
    return strncmp(g, "gb", 2) == 0 ? v * 1024 : 0;
}

/* Appends a slice of gpus[parent] at gpus[*n]; -1 with err when there is no room. */
static int add_slice(struct proto_gpu *gpus,
                     int *n,
                     int max,
                     int parent,
                     const char *profile,
                     const char *uuid,
                     struct mu_err *err)
{
    struct proto_gpu *s;
    if (*n >= max)
        return mu_errf(err, MU_E_TOOBIG, "more than %d GPUs and MIG slices", max);
    s = &gpus[*n];
    memset(s, 0, sizeof(*s));
    s->index = *n;
    mu_strlcpy(s->uuid, uuid, sizeof(s->uuid));
    mu_strlcpy(s->model, gpus[parent].model, sizeof(s->model));
    s->memory_mb = profile_memory_mb(profile);
    mu_strlcpy(s->pci_bus_id, gpus[parent].pci_bus_id, sizeof(s->pci_bus_id));
    s->island = gpus[parent].island;
    mu_strlcpy(s->profile, profile, sizeof(s->profile));
    s->parent = gpus[parent].index;
    gpus[parent].mig = true;
    (*n)++;
    return 0;
}

/* Slices need indices equal to positions: the GPUs' own indices must be 0..ngpus-1. */
static int check_indices(const struct proto_gpu *gpus, int ngpus, struct mu_err *err)
{
    for (int i = 0; i < ngpus; i++) {
        if (gpus[i].index < 0 || gpus[i].index >= ngpus)
            return mu_errf(err, MU_E_PARSE,
                           "GPU index %d: with MIG slices the GPU indices must be 0..%d",
                           gpus[i].index, ngpus - 1);
    }
    return 0;
}

/* One "GPU N: NAME (UUID: U)" line: the position of the GPU it names in gpus, or -1 with err. */
static int gpu_line(
    char *line, int lineno, const struct proto_gpu *gpus, int ngpus, struct mu_err *err)
{
    char uuid[96];
    char *p = line + 4;
    char *colon = strchr(p, ':');
    int64_t index;

    if (!colon)
        return mu_errf(err, MU_E_PARSE, "line %d: expected 'GPU N: NAME (UUID: GPU-...)'", lineno);
    *colon = '\0';
    if (mu_parse_i64(p, 0, PROTO_MAX_GPUS - 1, &index, NULL) != 0)
        return mu_errf(err, MU_E_PARSE, "line %d: GPU index: expected 0..%d, got '%s'", lineno,
                       PROTO_MAX_GPUS - 1, p);
    if (!take_uuid(colon + 1, uuid, sizeof(uuid)) || !mu_name_is_valid(uuid, sizeof(uuid) - 1))
        return mu_errf(err, MU_E_PARSE, "line %d: GPU %d: expected '(UUID: GPU-...)' at the end",
                       lineno, (int)index);
    for (int i = 0; i < ngpus; i++) {
        if (gpus[i].index == (int)index) {
            if (gpus[i].uuid[0] && strcmp(gpus[i].uuid, uuid) != 0)
                return mu_errf(err, MU_E_PARSE,
                               "line %d: GPU %d has UUID %s here but %s in the GPU query", lineno,
                               (int)index, uuid, gpus[i].uuid);
            return i;
        }
    }
    return mu_errf(err, MU_E_PARSE, "line %d: GPU %d is not in the GPU query", lineno, (int)index);
}

/* One "MIG PROFILE Device N: (UUID: MIG-...)" line (trimmed): its profile and UUID. */
static int mig_line(char *line, int lineno, char *profile, char *uuid, struct mu_err *err)
{
    char *p = skip_blanks(line + 3);
    char *end = p;
    char *dev;
    int64_t devno;
    char *colon;

    while (*end && *end != ' ' && *end != '\t')
        end++;
    if (*end == '\0')
        return mu_errf(err, MU_E_PARSE, "line %d: expected 'MIG PROFILE Device N: (UUID: MIG-...)'",
                       lineno);
    *end = '\0';
    if (!mu_mig_profile_is_valid(p))
        return mu_errf(err, MU_E_PARSE, "line %d: '%s' is not a MIG profile (e.g. 3g.40gb)", lineno,
                       p);
    mu_strlcpy(profile, p, 32);
    dev = skip_blanks(end + 1);
    if (strncmp(dev, "Device", 6) != 0)
        return mu_errf(err, MU_E_PARSE, "line %d: expected 'Device N:' after the profile", lineno);
    dev = skip_blanks(dev + 6);
    colon = strchr(dev, ':');
    if (!colon)
        return mu_errf(err, MU_E_PARSE, "line %d: expected 'Device N:' after the profile", lineno);
    *colon = '\0';
    if (mu_parse_i64(dev, 0, PROTO_MAX_GPUS - 1, &devno, NULL) != 0)
        return mu_errf(err, MU_E_PARSE, "line %d: MIG device number: expected 0..%d, got '%s'",
                       lineno, PROTO_MAX_GPUS - 1, dev);
    if (!take_uuid(colon + 1, uuid, 96) || !mig_uuid_valid(uuid) || *skip_blanks(colon + 1) != '\0')
        return mu_errf(err, MU_E_PARSE, "line %d: expected '(UUID: MIG-...)' after 'Device %d:'",
                       lineno, (int)devno);
    return 0;
}

int wrk_gpus_parse_mig(
    const char *text, struct proto_gpu *gpus, int ngpus, int max, int *n_out, struct mu_err *err)
{
    char line[LINE_MAX_BYTES];
    struct mu_lines it;
    int n = ngpus;
    int cur = -1; /* position of the GPU the MIG lines belong to */
    int got;

    if (!text)
        return mu_errf(err, MU_E_INVAL, "no nvidia-smi -L output");
    mu_lines_init(&it, text);
    while ((got = mu_lines_copy(&it, line, sizeof(line), err)) > 0) {
        int lineno = it.lineno;
        char *start = skip_blanks(line);

        if (strncmp(start, "GPU ", 4) == 0 && start == line) {
            cur = gpu_line(start, lineno, gpus, ngpus, err);
            if (cur < 0)
                return -1;
            if (gpus[cur].mig)
                return mu_errf(err, MU_E_PARSE, "line %d: GPU %d listed twice", lineno,
                               gpus[cur].index);
        } else if (strncmp(start, "MIG ", 4) == 0 && start != line) {
            char profile[32];
            char uuid[96];
            if (cur < 0)
                return mu_errf(err, MU_E_PARSE, "line %d: a MIG device before any GPU line",
                               lineno);
            if (mig_line(start, lineno, profile, uuid, err) != 0)
                return -1;
            if (n == ngpus && check_indices(gpus, ngpus, err) != 0)
                return -1;
            for (int i = ngpus; i < n; i++) {
                if (strcmp(gpus[i].uuid, uuid) == 0)
                    return mu_errf(err, MU_E_PARSE, "line %d: MIG device %s listed twice", lineno,
                                   uuid);
            }
            if (add_slice(gpus, &n, max, cur, profile, uuid, err) != 0)
                return -1;
        } else {
            return mu_errf(err, MU_E_PARSE,
                           "line %d: expected 'GPU N: ...' or an indented 'MIG PROFILE Device "
                           "N: ...'",
                           lineno);
        }
    }
    if (got < 0)
        return -1;
    *n_out = n;
    return 0;
}

int wrk_gpus_simulate_mig(
    const char *text, struct proto_gpu *gpus, int ngpus, int max, int *n_out, struct mu_err *err)
{
    char buf[1024];
    char *save = NULL;
    int n = ngpus;
    int gpu = 0;

    if (mu_strlcpy(buf, text, sizeof(buf)) >= sizeof(buf))
        return mu_errf(err, MU_E_TOOBIG, "longer than %zu bytes", sizeof(buf) - 1);
    if (buf[0] == '\0' || buf[strlen(buf) - 1] == ',' || buf[0] == ',' || strstr(buf, ",,"))
        return mu_errf(err, MU_E_PARSE,
                       "expected one entry per GPU separated by commas, e.g. 7x1g.10gb,-");
    for (char *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save), gpu++) {
        char *next;
        if (gpu >= ngpus)
            return mu_errf(err, MU_E_RANGE, "%d entries for %d GPUs", gpu + 1, ngpus);
        if (strcmp(e, "-") == 0)
            continue;
        for (char *part = e; part; part = next) {
            char *x = strchr(part, 'x');
            char *plus = part;
            int64_t count;
            char uuid[96];
            /* '+' before a count starts the next part; any other '+' is the profile's ("+me") */
            next = NULL;
            while ((plus = strchr(plus, '+')) != NULL) {
                if (isdigit((unsigned char)plus[1])) {
                    *plus = '\0';
                    next = plus + 1;
                    break;
                }
                plus++;
            }
            if (!x)
                return mu_errf(err, MU_E_PARSE,
                               "GPU %d: '%s': expected COUNTxPROFILE, e.g. 7x1g.10gb", gpu, part);
            *x = '\0';
            if (mu_parse_i64(part, 1, 7, &count, NULL) != 0)
                return mu_errf(err, MU_E_PARSE, "GPU %d: slice count '%s': expected 1..7", gpu,
                               part);
            if (!mu_mig_profile_is_valid(x + 1))
                return mu_errf(err, MU_E_PARSE, "GPU %d: '%s' is not a MIG profile (e.g. 3g.40gb)",
                               gpu, x + 1);
            for (int k = 0; k < count; k++) {
                (void)mu_snprintf(uuid, sizeof(uuid), "MIG-sim-%d-%d", gpu, n - ngpus);
                if (add_slice(gpus, &n, max, gpu, x + 1, uuid, err) != 0)
                    return -1;
            }
        }
        if (!gpus[gpu].mig)
            return mu_errf(err, MU_E_PARSE, "GPU %d: no slices; '-' keeps a GPU whole", gpu);
    }
    *n_out = n;
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the `nvidia-smi topo -m` matrix parser (worker/topo.c).  The input is made a C
 * string, as the worker does with captured output, and parsed for several GPU counts.  For any
 * bytes the parser must return 0 or -1 with a message; on success every island must be in
 * 0..nislands-1, numbered in the order of the lowest GPU (GPU0 in island 0, each new island one
 * more than the largest so far), and on failure the output array must be untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/wrk.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int counts[] = { 1, 2, 4, 8, PROTO_MAX_GPUS };
    char *text;

    if (size > WRK_NVSMI_MAX_BYTES)
        return 0;
    text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    for (size_t c = 0; c < MU_ARRAY_LEN(counts); c++) {
        int ngpus = counts[c];
        int island[PROTO_MAX_GPUS];
        int nislands = -1;
        int top = -1;
        struct mu_err err;

        memset(island, 0x55, sizeof(island));
        mu_err_clear(&err);
        if (wrk_topo_parse(text, ngpus, island, &nislands, &err) != 0) {
            if (err.msg[0] == '\0' || nislands != -1 || island[0] != 0x55555555)
                abort();
            continue;
        }
        if (nislands < 1 || nislands > ngpus)
            abort();
        for (int g = 0; g < ngpus; g++) {
            if (island[g] < 0 || island[g] >= nislands || island[g] > top + 1)
                abort();
            if (island[g] > top)
                top = island[g];
        }
        if (top != nislands - 1)
            abort();
    }
    free(text);
    return 0;
}

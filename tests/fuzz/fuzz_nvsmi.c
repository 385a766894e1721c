/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the nvidia-smi CSV parser (worker/gpus.c), the `nvidia-smi -L` MIG parser and
 * the --mig list (worker/mig.c).  The input is made a C string, as
 * the worker does with captured output; the parser must return 0 or -1 with a message for any
 * bytes, and never report more GPUs than it was given room for.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/wrk.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    int n = -1;
    char *text;

    if (size > WRK_NVSMI_MAX_BYTES)
        return 0;
    text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    /* `nvidia-smi -L` (worker/mig.c) on the same bytes, over 8 simulated GPUs (any UUID
     * matches), and --mig's list: 0 with at most max entries, or -1 with a message. */
    for (int max = 8; max <= PROTO_MAX_GPUS; max *= 8) {
        mu_err_clear(&err);
        wrk_gpus_simulate(gpus, 8, NULL);
        if (wrk_gpus_parse_mig(text, gpus, 8, max, &n, &err) == 0) {
            if (n < 8 || n > max)
                abort();
        } else if (err.msg[0] == '\0') {
            abort();
        }
        mu_err_clear(&err);
        wrk_gpus_simulate(gpus, 8, NULL);
        if (wrk_gpus_simulate_mig(text, gpus, 8, max, &n, &err) == 0) {
            if (n < 8 || n > max)
                abort();
        } else if (err.msg[0] == '\0') {
            abort();
        }
    }
    for (int max = 1; max <= PROTO_MAX_GPUS; max *= 8) {
        mu_err_clear(&err);
        if (wrk_gpus_parse_csv(text, gpus, max, &n, &err) == 0) {
            if (n < 1 || n > max)
                abort();
        } else if (err.msg[0] == '\0') {
            abort();
        }
    }
    free(text);
    return 0;
}

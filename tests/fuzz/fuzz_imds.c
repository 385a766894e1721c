/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the EC2 metadata documents the spot watcher parses (worker/imds_parse.c):
 * spot/instance-action, events/recommendations/rebalance and their UTC times, plus the
 * checkpoint file parser (worker/ckpt.c), which reads bytes a task wrote.  The bytes are given
 * as they come off the network, not NUL-terminated; every parser must return 0 or -1 with a
 * message, and a success must hold a known action and a time no earlier than 1970.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/wrk.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wrk_imds_action act;
    struct mu_err err;
    char path[PROTO_PATH_MAX];
    uint64_t ms = 0;
    char *copy;

    if (size > WRK_IMDS_MAX_BODY)
        return 0;
    /* An exact-size heap copy, so that ASan catches a read past len. */
    copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);

    memset(&act, 0, sizeof(act));
    mu_err_clear(&err);
    if (wrk_imds_parse_action(copy, size, &act, &err) == 0) {
        if (strcmp(act.action, "terminate") != 0 && strcmp(act.action, "stop") != 0
            && strcmp(act.action, "hibernate") != 0)
            abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    mu_err_clear(&err);
    if (wrk_imds_parse_rebalance(copy, size, &ms, &err) != 0 && err.msg[0] == '\0')
        abort();
    mu_err_clear(&err);
    if (wrk_ckpt_parse(copy, size, path, sizeof(path), &err) == 0) {
        if (path[0] == '\0' || strlen(path) >= sizeof(path))
            abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    free(copy);

    /* The time parser takes a C string. */
    copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    mu_err_clear(&err);
    if (wrk_imds_parse_time(copy, &ms, &err) != 0 && err.msg[0] == '\0')
        abort();
    free(copy);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for Redis URLs (queue/url.c): every program takes one from --redis or
 * MUSTER_REDIS_URL, plain or the Sentinel form (issue #14).  A URL must parse to a result that
 * keeps its invariants (a host, a port in 1..65535, at most QUEUE_SENTINELS_MAX Sentinels each
 * with a host and port, a master name for the Sentinel form) or fail with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/queue.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    struct queue_url u;
    struct mu_err err;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (queue_url_parse(text, &u, &err) != 0) {
        if (!err.msg[0])
            abort();
    } else if (u.nsentinels > 0) {
        if (u.nsentinels > QUEUE_SENTINELS_MAX || !u.master[0])
            abort();
        for (int i = 0; i < u.nsentinels; i++) {
            if (!u.sentinels[i].host[0] || u.sentinels[i].port < 1 || u.sentinels[i].port > 65535)
                abort();
        }
    } else if (!u.host[0] || u.port < 1 || u.port > 65535 || u.db < 0) {
        abort();
    }
    free(text);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for Redis URLs (common/url.c): every program takes one from --redis,
 * MUSTER_REDIS_URL or the config's "redis", plain or the Sentinel form (issues #14, #40).  A URL
 * must parse to a result that keeps its invariants (a host, a port in 1..65535, at most
 * MU_REDIS_SENTINELS_MAX Sentinels each with a host and port, a master name for the Sentinel
 * form) or fail with a message.  And the config's "redis" key must take exactly the URLs the
 * parser takes (one grammar, issue #40): a printable URL that fits is put in a config and the
 * two answers compared.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/mu.h"
#include "config/cfg.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool printable(const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    }
    return true;
}

/* The config takes text as "redis" exactly when mu_redis_url_parse does (parsed: its answer). */
static void config_agrees(const char *text, bool parsed)
{
    cJSON *o = NULL;
    char *json = NULL;
    struct cfg *c = NULL;
    struct mu_err err;

    if (strlen(text) >= CFG_REDIS_URL_MAX || !printable(text))
        return;
    o = cJSON_CreateObject();
    c = malloc(sizeof(*c));
    if (!o || !c || !cJSON_AddStringToObject(o, "redis", text)
        || !(json = cJSON_PrintUnformatted(o)))
        goto out;
    if ((cfg_parse(c, json, strlen(json), &err) == 0) != parsed)
        abort();
    if (parsed && strcmp(c->redis, text) != 0)
        abort();
out:
    cJSON_free(json);
    cJSON_Delete(o);
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    struct mu_redis_url u;
    struct mu_err err;
    bool parsed;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    parsed = mu_redis_url_parse(text, &u, &err) == 0;
    if (!parsed) {
        if (!err.msg[0])
            abort();
    } else if (u.nsentinels > 0) {
        if (u.nsentinels > MU_REDIS_SENTINELS_MAX || !u.master[0])
            abort();
        for (int i = 0; i < u.nsentinels; i++) {
            if (!u.sentinels[i].host[0] || u.sentinels[i].port < 1 || u.sentinels[i].port > 65535)
                abort();
        }
    } else if (!u.host[0] || u.port < 1 || u.port > 65535 || u.db < 0) {
        abort();
    }
    config_agrees(text, parsed);
    free(text);
    return 0;
}

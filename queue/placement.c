/* SPDX-License-Identifier: MIT */
/*
 * The placement record (queue/vocab.h), written by musterd at STARTING and read back by a
 * restarted musterd (adoption), musterctl show and musterctl logs.  One encoder and one decoder so
 * that the four agree on the format: [{"task":0,"node":"n1","gpus":[0,1]}, ...].  Both work in
 * place (a callback per task), so a start or a restart allocates nothing per task here.
 */
#include "queue/vocab.h"

#include <cjson/cJSON.h>

#include "common/mu_banned.h"

int queue_placement_format(
    struct mu_buf *out, int ntasks, queue_placement_get_fn *get, void *ctx, struct mu_err *err)
{
    if (mu_buf_append(out, "[", 1, err) != 0)
        return -1;
    for (int t = 0; t < ntasks; t++) {
        const char *node = "";
        uint64_t gpus = 0;
        bool first_gpu = true;

        get(ctx, t, &node, &gpus);
        if (mu_buf_appendf(out, err, "%s{\"task\":%d,\"node\":", t ? "," : "", t) != 0
            || mu_buf_append_json_str(out, node, err) != 0
            || mu_buf_append(out, ",\"gpus\":[", 9, err) != 0)
            return -1;
        for (int g = 0; g < QUEUE_PLACEMENT_GPUS; g++) {
            if (!(gpus & (UINT64_C(1) << g)))
                continue;
            if (mu_buf_appendf(out, err, "%s%d", first_gpu ? "" : ",", g) != 0)
                return -1;
            first_gpu = false;
        }
        if (mu_buf_append(out, "]}", 2, err) != 0)
            return -1;
    }
    return mu_buf_append(out, "]", 1, err);
}

int queue_placement_each(const struct cJSON *placement, queue_placement_fn *fn, void *ctx)
{
    const cJSON *item;

    if (!cJSON_IsArray(placement))
        return -1;
    cJSON_ArrayForEach(item, placement)
    {
        const cJSON *task = cJSON_GetObjectItemCaseSensitive(item, "task");
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(item, "node");
        const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(item, "gpus");
        const cJSON *g;
        uint64_t mask = 0;
        int rc;

        if (!cJSON_IsNumber(task) || !cJSON_IsString(node) || !cJSON_IsArray(gpus)
            || task->valueint < 0)
            return -1;
        cJSON_ArrayForEach(g, gpus)
        {
            if (!cJSON_IsNumber(g) || g->valueint < 0 || g->valueint >= QUEUE_PLACEMENT_GPUS)
                return -1;
            mask |= UINT64_C(1) << g->valueint;
        }
        rc = fn(ctx, task->valueint, node->valuestring, mask);
        if (rc != 0)
            return rc;
    }
    return 0;
}

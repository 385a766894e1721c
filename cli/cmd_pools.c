/* SPDX-License-Identifier: MIT */
/*
 * musterctl pools: per pool, what musterd last published in the pools status hash: capacity
 * type, instance and GPU type, registered nodes, GPUs free/used, price per node-hour, the GPU
 * cap (max_gpus, "-" when unlimited) and the spot cool-down.  The cool-down column reads the
 * optional "cooldown_until" (wall ms, 0 = none) and shows the time left, so an operator sees why
 * musterd avoids a pool after an interruption.  When some pool has MIG slices, a
 * SLICES_FREE/TOTAL column ("1g.10gb:5/7") follows GPUS_FREE/USED.  The table is shared with
 * `top`.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

struct ctl_table *ctl_pools_table(const cJSON *pools, uint64_t now_ms)
{
    static const char *const headers[] = { "POOL",           "CAPACITY", "TYPE", "GPU",     "NODES",
                                           "GPUS_FREE/USED", "PRICE/H",  "CAP",  "COOLDOWN" };
    static const char *const headers_slices[] = {
        "POOL",           "CAPACITY",          "TYPE",    "GPU", "NODES",
        "GPUS_FREE/USED", "SLICES_FREE/TOTAL", "PRICE/H", "CAP", "COOLDOWN"
    };
    bool slices = ctl_any_slices(pools);
    struct ctl_table *t = slices ? ctl_table_new(headers_slices, MU_ARRAY_LEN(headers_slices))
                                 : ctl_table_new(headers, MU_ARRAY_LEN(headers));
    const cJSON *p;

    if (!t)
        return NULL;
    ctl_table_set_flex(t, 0);
    ctl_table_set_flex(t, 2);
    cJSON_ArrayForEach(p, pools)
    {
        char b[5][64];
        char gpus[48];
        char price[32] = "-";
        char cap[32] = "-";
        char cool[16] = "-";
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(p, "price_per_hour");
        int64_t max_gpus = ctl_json_int(p, "max_gpus", 0);
        int64_t until = ctl_json_int(p, "cooldown_until", 0);
        char slice_text[256];
        const char *cells[10];

        (void)snprintf(gpus, sizeof(gpus), "%lld/%lld", (long long)ctl_json_int(p, "gpus_free", 0),
                       (long long)ctl_json_int(p, "gpus_used", 0));
        if (cJSON_IsNumber(pr))
            (void)snprintf(price, sizeof(price), "%.2f", pr->valuedouble);
        if (max_gpus > 0)
            (void)snprintf(cap, sizeof(cap), "%lld", (long long)max_gpus);
        if (until > 0 && (uint64_t)until > now_ms)
            ctl_format_age((uint64_t)until, now_ms, cool, sizeof(cool));
        cells[0] = ctl_json_text(p, "name", b[0], sizeof(b[0]));
        cells[1] = ctl_json_text(p, "capacity", b[1], sizeof(b[1]));
        cells[2] = ctl_json_text(p, "instance_type", b[2], sizeof(b[2]));
        cells[3] = ctl_json_text(p, "gpu_type", b[3], sizeof(b[3]));
        cells[4] = ctl_json_text(p, "nodes", b[4], sizeof(b[4]));
        cells[5] = gpus;
        cells[6] = price;
        cells[7] = cap;
        cells[8] = cool;
        if (slices) {
            memmove(&cells[7], &cells[6], 3 * sizeof(cells[0]));
            ctl_slices_text(cJSON_GetObjectItemCaseSensitive(p, "slices"), slice_text,
                            sizeof(slice_text));
            cells[6] = slice_text;
        }
        if (ctl_table_add(t, cells) != 0) {
            ctl_table_free(t);
            return NULL;
        }
    }
    return t;
}

int ctl_cmd_pools(struct ctl *ctl, const struct ctl_args *args)
{
    (void)args;
    return ctl_status_show(ctl, QUEUE_K_POOLS, ctl_pools_table);
}

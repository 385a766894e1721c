/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the EC2 instance topology reader (config/ec2topo.c, issue #16): the file an
 * operator hands `musterctl topology import` and the per-instance JSON musterd reads back from
 * Redis.  Both must return a result or -1 with a message; a file that reads must hold 1.. instances
 * with ids and 1..CFG_TOPO_MAX_NODES network nodes each, and every instance must survive the
 * stored form (format, then parse) unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_instance(const struct cfg_topo_instance *in)
{
    struct cfg_topo_instance back;
    struct mu_err err;
    char *json;

    if (!in->instance_id[0] || in->nnodes < 1 || in->nnodes > CFG_TOPO_MAX_NODES)
        abort();
    json = cfg_topo_instance_format(in, &err);
    if (!json)
        return; /* out of memory */
    if (cfg_topo_instance_parse(json, strlen(json), &back, &err) != 0
        || memcmp(&back.nodes, &in->nodes, sizeof(back.nodes)) != 0
        || strcmp(back.instance_id, in->instance_id) != 0
        || strcmp(back.group_name, in->group_name) != 0)
        abort();
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cfg_topo_instance one;
    struct cfg_topo *t;
    struct mu_err err;
    char *copy;

    if (size > (1u << 20))
        return 0;
    /* An exact-size heap copy, so that ASan catches a read past len. */
    copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    mu_err_clear(&err);
    t = cfg_topo_parse(copy, size, &err);
    if (t) {
        if (cfg_topo_count(t) < 1)
            abort();
        for (int i = 0; i < cfg_topo_count(t); i++)
            check_instance(cfg_topo_get(t, i));
        cfg_topo_free(t);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    mu_err_clear(&err);
    if (cfg_topo_instance_parse(copy, size, &one, &err) == 0)
        check_instance(&one);
    else if (err.msg[0] == '\0')
        abort();
    free(copy);
    return 0;
}

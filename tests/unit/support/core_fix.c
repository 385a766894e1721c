/* SPDX-License-Identifier: MIT */
/*
 * The core tests' node builder (core_fix.h): the one copy of what test_sched, test_explain,
 * test_preempt, test_slice and test_quota each wrote as their own add_node (issue #41).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/core_fix.h"

#include "common/mu_banned.h"

void cfix_node_spec(struct sched_node_spec *s,
                    const struct sched_cluster *c,
                    const char *name,
                    int pool,
                    int gpus,
                    const char *path)
{
    memset(s, 0, sizeof(*s));
    (void)mu_snprintf(s->name, sizeof(s->name), "%s", name);
    s->pool = pool;
    s->ngpus = gpus;
    s->cpus = 96;
    s->memory_mb = 1 << 20;
    s->nlabels = sched_cluster_level_count(c);
    for (int l = 0; l < s->nlabels; l++) {
        const char *slash = strchr(path, '/');
        size_t len = slash ? (size_t)(slash - path) : strlen(path);
        (void)mu_snprintf(s->labels[l], sizeof(s->labels[l]), "%.*s", (int)len, path);
        path = slash ? slash + 1 : path + len;
    }
}

int cfix_node_add_spec(struct sched_cluster *c, const struct sched_node_spec *s)
{
    struct mu_err err;
    int idx = sched_cluster_node_add(c, s, &err);
    if (idx < 0)
        fail_msg("node '%s': %s", s->name, err.msg);
    return idx;
}

int cfix_node_add(struct sched_cluster *c, const char *name, int pool, int gpus, const char *path)
{
    struct sched_node_spec s;
    cfix_node_spec(&s, c, name, pool, gpus, path);
    return cfix_node_add_spec(c, &s);
}

/* SPDX-License-Identifier: MIT */
/*
 * The modelled cluster (sim.h): node counts per pool from "--nodes pool=N,...", spot rates, and
 * the core's cluster built from them.  Topology labels are spread over the configured levels
 * in a fixed pattern (8 nodes share the narrowest domain, 4 domains one of the next wider), with
 * the pools one after the other, so that a replay exercises the same topology rules as a real
 * cluster without a file of labels; the pattern is in docs/simulator.md.
 */
#include "sim/internal.h"

#include <string.h>

#include "cfg_sched/cfg_sched.h"

#include "common/mu_banned.h"

#define GROUP_NODES  8 /* nodes in one domain of the narrowest level */
#define GROUP_FANOUT 4 /* domains of a level inside one of the next wider level */

void sim_setup_defaults(struct sim_setup *s)
{
    memset(s, 0, sizeof(*s));
    cfg_init_defaults(&s->cfg);
    s->notice_s = 120;
    s->ckpt_write_s = 60;
    s->restart_s = 120;
    s->replace_s = 600;
    s->seed = 1;
}

/* Calls fn on each "name=value" of a comma list; 0 or -1 with err. */
static int each_pair(struct sim_setup *s,
                     const char *text,
                     const char *what,
                     int (*fn)(struct sim_setup *, int, const char *, struct mu_err *),
                     struct mu_err *err)
{
    char buf[1024];
    char *p = buf;

    if (mu_snprintf(buf, sizeof(buf), "%s", text) != 0)
        return mu_errf(err, MU_E_USAGE, "%s: longer than %zu bytes", what, sizeof(buf) - 1);
    for (;;) {
        char *comma = strchr(p, ',');
        char *eq;
        const struct cfg_pool *pool;
        if (comma)
            *comma = '\0';
        eq = strchr(p, '=');
        if (!eq)
            return mu_errf(err, MU_E_USAGE, "%s: expected POOL=VALUE, got '%s'", what, p);
        *eq = '\0';
        pool = cfg_pool_find(&s->cfg, p);
        if (!pool)
            return mu_errf(err, MU_E_USAGE, "%s: pool '%s' is not in the config", what, p);
        if (fn(s, (int)(pool - s->cfg.pools), eq + 1, err) != 0) {
            mu_err_prefix(err, "%s: %s: ", what, p);
            return -1;
        }
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static int set_nodes(struct sim_setup *s, int pool, const char *v, struct mu_err *err)
{
    int64_t n;
    if (mu_parse_i64(v, 0, 100000, &n, err) != 0)
        return -1;
    s->nodes[pool] = (int)n;
    return 0;
}

static int set_rate(struct sim_setup *s, int pool, const char *v, struct mu_err *err)
{
    if (s->cfg.pools[pool].capacity != CFG_CAPACITY_SPOT)
        return mu_errf(err, MU_E_USAGE, "not a spot pool");
    return mu_parse_double(v, 0, 100, &s->spot_rate[pool], err);
}

int sim_setup_parse_nodes(struct sim_setup *s, const char *text, struct mu_err *err)
{
    int total = 0;
    memset(s->nodes, 0, sizeof(s->nodes));
    if (each_pair(s, text, "--nodes", set_nodes, err) != 0)
        return -1;
    for (int p = 0; p < s->cfg.npools; p++)
        total += s->nodes[p];
    if (total < 1 || total > 100000)
        return mu_errf(err, MU_E_USAGE, "--nodes: %d nodes in all, expected 1..100000", total);
    return 0;
}

int sim_setup_parse_spot_rate(struct sim_setup *s, const char *text, struct mu_err *err)
{
    double r;
    if (strchr(text, '=') == NULL) {
        if (mu_parse_double(text, 0, 100, &r, err) != 0) {
            mu_err_prefix(err, "--spot-rate: ");
            return -1;
        }
        for (int p = 0; p < s->cfg.npools; p++)
            s->spot_rate[p] = s->cfg.pools[p].capacity == CFG_CAPACITY_SPOT ? r : 0;
        return 0;
    }
    return each_pair(s, text, "--spot-rate", set_rate, err);
}

int sim_setup_gpus_per_node(const struct sim_setup *s)
{
    int g = 0;
    for (int p = 0; p < s->cfg.npools; p++)
        if (s->nodes[p] > 0 && s->cfg.pools[p].gpus_per_node > g)
            g = s->cfg.pools[p].gpus_per_node;
    return g > 0 ? g : 8;
}

/* Node i's label at level l of nlevels: "<level><group>", groups widening by GROUP_FANOUT. */
static void node_labels(const struct cfg *cfg, int i, struct sched_node_spec *spec)
{
    spec->nlabels = cfg->nlevels;
    for (int l = 0; l < cfg->nlevels; l++) {
        int size = GROUP_NODES;
        for (int k = l + 1; k < cfg->nlevels; k++)
            size *= GROUP_FANOUT;
        (void)mu_snprintf(spec->labels[l], sizeof(spec->labels[l]), "%.40s%d", cfg->levels[l],
                          i / size);
    }
}

struct sched_cluster *sim_cluster_build(const struct sim_setup *s, struct mu_err *err)
{
    struct sched_cluster *c = cfg_sched_cluster_new(&s->cfg, err); /* as musterd's */
    int i = 0;

    if (!c)
        return NULL;
    for (int p = 0; p < s->cfg.npools; p++) {
        for (int k = 0; k < s->nodes[p]; k++, i++) {
            struct sched_node_spec spec;
            memset(&spec, 0, sizeof(spec));
            (void)mu_snprintf(spec.name, sizeof(spec.name), "n%d", i);
            spec.pool = p;
            spec.ngpus = s->cfg.pools[p].gpus_per_node;
            node_labels(&s->cfg, i, &spec);
            if (sched_cluster_node_add(c, &spec, err) < 0) {
                sched_cluster_free(c);
                return NULL;
            }
        }
    }
    return c;
}

const char *sim_policy_name(enum sim_policy p)
{
    static const char *const names[SIM_NPOLICIES] = { "fifo", "backfill", "node-drain", "muster" };
    return p >= 0 && p < SIM_NPOLICIES ? names[p] : "?";
}

int sim_policy_parse_list(const char *text, unsigned *set, struct mu_err *err)
{
    const char *p = text;
    *set = 0;
    while (*p) {
        size_t n = strcspn(p, ",");
        int k = 0;
        while (k < SIM_NPOLICIES
               && !(strlen(sim_policy_name((enum sim_policy)k)) == n
                    && strncmp(p, sim_policy_name((enum sim_policy)k), n) == 0))
            k++;
        if (k == SIM_NPOLICIES)
            return mu_errf(err, MU_E_USAGE,
                           "--policies: unknown policy '%.*s' (fifo, backfill, node-drain, muster)",
                           (int)n, p);
        *set |= 1u << k;
        p += n;
        if (*p == ',')
            p++;
    }
    if (*set == 0)
        return mu_errf(err, MU_E_USAGE, "--policies: empty");
    return 0;
}

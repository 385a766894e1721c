/* SPDX-License-Identifier: MIT */
/*
 * muster-sim gen (sim.h): a synthetic trace in muster's schema, seeded.  The shapes follow the
 * published cluster summaries in ../shared/traces/ (Philly: median GPU-job run 874 s, mean about
 * 18,000 s; median job 1 GPU): run times are log-normal with that median and a heavy tail (sigma
 * 2.2, capped at 7 days); arrivals are bursty, a two-state Markov-modulated Poisson process (calm
 * at half the mean rate for about 2 h, bursts at 4x for about 20 min); gang sizes are mostly one
 * GPU, some part of a node, and 1 in 8 whole-node gangs of 1..max_nodes nodes (probability
 * falling as 1/size).  Users over-ask their time limits by 1.2-3x, as trace studies report.
 */
#include "sim/internal.h"

#include <math.h>
#include <string.h>

#include "common/mu_banned.h"

#define MEDIAN_RUN_S 874.0
#define SIGMA_RUN    2.2
#define MAX_RUN_S    (7 * 86400.0)

void sim_gen_defaults(struct sim_gen_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->jobs = 1000;
    o->seed = 1;
    o->jobs_per_hour = 60;
    o->gpus_per_node = 8;
    o->max_nodes = 64;
    o->queues = "default";
}

static double normal(uint64_t *rng)
{
    /* Box-Muller: one of the pair is enough */
    double u = sim_rng_unit(rng);
    double v = sim_rng_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* GPUs of one job: 1, 2, 4, a whole node, or 2..max_nodes whole nodes. */
static void gang(const struct sim_gen_opts *o, uint64_t *rng, int *tasks, int *gpt)
{
    double u = sim_rng_unit(rng);
    int g = o->gpus_per_node;
    *tasks = 1;
    if (u < 0.55)
        *gpt = 1;
    else if (u < 0.66)
        *gpt = g >= 2 ? 2 : 1;
    else if (u < 0.76)
        *gpt = g >= 4 ? 4 : g;
    else if (u < 0.875)
        *gpt = g;
    else {
        /* nodes k in 2..max with P(k) ~ 1/k: k = floor(2 * (max/2)^U) */
        double span = o->max_nodes > 2 ? (double)o->max_nodes / 2.0 : 1.0;
        int k = (int)floor(2.0 * pow(span, sim_rng_unit(rng)));
        *tasks = k < 2 ? (o->max_nodes >= 2 ? 2 : 1) : k > o->max_nodes ? o->max_nodes : k;
        *gpt = g;
    }
}

static int one_queue(const char *list, int pick, char *out, size_t size)
{
    const char *p = list;
    for (int i = 0; i < pick; i++) {
        p = strchr(p, ',');
        if (!p)
            return -1;
        p++;
    }
    (void)mu_snprintf(out, size, "%.*s", (int)strcspn(p, ","), p);
    return 0;
}

int sim_gen(const struct sim_gen_opts *o, struct mu_buf *out, struct mu_err *err)
{
    uint64_t rng = sim_rng_mix(o->seed, 0x67656e);
    int nqueues = 1;
    double t = 0;
    bool burst = false;
    double state_left = 0;

    if (o->jobs < 1 || o->jobs > SIM_TRACE_MAX_ROWS || !(o->jobs_per_hour > 0)
        || o->gpus_per_node < 1 || o->gpus_per_node > SCHED_MAX_GPUS_NODE || o->max_nodes < 1
        || o->max_nodes > 64 || !o->queues || !o->queues[0])
        return mu_errf(err, MU_E_USAGE, "gen: options out of range");
    for (const char *p = o->queues; *p; p++)
        nqueues += *p == ',';
    if (mu_buf_appendf(out, err,
                       "submit_s,duration_s,tasks,gpus_per_task,queue,priority,time_limit_s,"
                       "checkpoint_interval_s,preemptible\n")
        != 0)
        return -1;
    for (int i = 0; i < o->jobs; i++) {
        double mean_gap = 3600.0 / o->jobs_per_hour / (burst ? 4.0 : 0.5);
        double gap = sim_rng_exp(&rng, mean_gap);
        double run = exp(log(MEDIAN_RUN_S) + SIGMA_RUN * normal(&rng));
        double over = 1.2 + 1.8 * sim_rng_unit(&rng);
        int tasks, gpt;
        char q[CFG_NAME_MAX];
        state_left -= gap;
        if (state_left <= 0) {
            burst = !burst;
            state_left = sim_rng_exp(&rng, burst ? 1200.0 : 7200.0);
        }
        t += gap;
        run = run < 10 ? 10 : run > MAX_RUN_S ? MAX_RUN_S : run;
        gang(o, &rng, &tasks, &gpt);
        if (one_queue(o->queues, (int)(sim_rng_next(&rng) % (uint64_t)nqueues), q, sizeof(q)) != 0)
            return mu_errf(err, MU_E_USAGE, "gen: bad --queues list");
        if (mu_buf_appendf(out, err, "%.0f,%.0f,%d,%d,%s,%d,%.0f,%d,%s\n", floor(t), ceil(run),
                           tasks, gpt, q, sim_rng_unit(&rng) < 0.15 ? 10 : 0,
                           ceil(run * over / 60.0) * 60.0, run > 3600 ? 1800 : 0,
                           sim_rng_unit(&rng) < 0.8 ? "true" : "false")
            != 0)
            return -1;
    }
    return 0;
}

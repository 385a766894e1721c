/* SPDX-License-Identifier: MIT */
/*
 * A replay's result (sim.h): the per-policy numbers computed once the replay ends, the samples
 * for plots and the start order.  Percentiles are nearest-rank over the jobs that ended
 * (completed or timed out), so a job left unfinished by a stuck replay is counted as such
 * rather than bending the percentiles.
 */
#include "sim/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct sim_result *sim_result_new(enum sim_policy p, int njobs)
{
    struct sim_result *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->policy = p;
    r->start_order = calloc((size_t)njobs + 1, sizeof(int));
    r->jcts = calloc((size_t)njobs + 1, sizeof(double));
    r->waits = calloc((size_t)njobs + 1, sizeof(double));
    r->first_start_ms = calloc((size_t)njobs + 1, sizeof(int64_t));
    r->end_ms = calloc((size_t)njobs + 1, sizeof(int64_t));
    r->first_cap = calloc((size_t)njobs + 1, sizeof(int));
    r->last_start_ms = calloc((size_t)njobs + 1, sizeof(int64_t));
    r->attempts = calloc((size_t)njobs + 1, sizeof(int));
    r->outcome = calloc((size_t)njobs + 1, 1);
    if (!r->start_order || !r->jcts || !r->waits || !r->first_start_ms || !r->end_ms
        || !r->first_cap || !r->outcome || !r->last_start_ms || !r->attempts) {
        sim_result_free(r);
        return NULL;
    }
    return r;
}

void sim_result_free(struct sim_result *r)
{
    if (!r)
        return;
    free(r->samples);
    free(r->attempts);
    free(r->last_start_ms);
    free(r->outcome);
    free(r->first_cap);
    free(r->end_ms);
    free(r->first_start_ms);
    free(r->waits);
    free(r->jcts);
    free(r->start_order);
    free(r);
}

int sim_result_sample(struct sim_result *r, const struct sim_sample *s)
{
    if (r->nsamples == r->cap_samples) {
        int cap = r->cap_samples ? r->cap_samples * 2 : 256;
        struct sim_sample *n = realloc(r->samples, (size_t)cap * sizeof(*n));
        if (!n)
            return -1;
        r->samples = n;
        r->cap_samples = cap;
    }
    r->samples[r->nsamples++] = *s;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least q of the values at or below it. */
static double pct(const double *v, int n, double q)
{
    int k;
    if (n == 0)
        return 0;
    k = (int)ceil(q * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static void summary(double *v, int n, double *mean, double *p50, double *p95, double *p99)
{
    double sum = 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    for (int i = 0; i < n; i++)
        sum += v[i];
    *mean = n ? sum / n : 0;
    *p50 = pct(v, n, 0.50);
    *p95 = pct(v, n, 0.95);
    *p99 = pct(v, n, 0.99);
}

void sim_result_finish(struct sim_engine *e)
{
    struct sim_result *r = e->res;
    struct sim_stats *st = &r->st;
    double *wait = r->waits;
    double bsld = 0, useful = 0;
    int n = 0;

    st->jobs = e->njobs - st->never_fit;
    for (int j = 0; j < e->njobs; j++) {
        const struct sim_sjob *s = &e->sj[j];
        double run;
        r->first_start_ms[j] = s->first_start_ms;
        r->end_ms[j] = s->state == SJ_DONE ? s->end_ms : -1;
        r->first_cap[j] = s->first_start_ms >= 0 ? s->first_cap : -1;
        r->last_start_ms[j] = s->first_start_ms >= 0 ? s->att_start_ms : -1;
        r->attempts[j] = s->attempts;
        r->outcome[j] = s->state == SJ_NEVER  ? SIM_NEVER_FIT
                        : s->state != SJ_DONE ? SIM_UNFINISHED
                        : s->timed_out        ? SIM_TIMED_OUT
                                              : SIM_COMPLETED;
        if (s->state == SJ_NEVER)
            continue;
        if (s->state != SJ_DONE) {
            st->unfinished++;
            continue;
        }
        if (s->timed_out)
            st->timed_out++;
        else
            st->completed++;
        r->jcts[n] = (double)(s->end_ms - e->jobs[j].submit_ms) / 1000;
        wait[n] = (double)(s->first_start_ms - e->jobs[j].submit_ms) / 1000;
        run = (double)e->jobs[j].duration_s;
        bsld += fmax(1.0, r->jcts[n] / fmax(run, 10.0));
        if (!s->timed_out)
            useful += run * e->jobs[j].tasks * e->jobs[j].gpus_per_task;
        if ((double)s->end_ms / 1000 > st->makespan_s)
            st->makespan_s = (double)s->end_ms / 1000;
        n++;
    }
    r->njcts = n;
    summary(wait, n, &st->wait_mean_s, &st->wait_p50_s, &st->wait_p95_s, &st->wait_p99_s);
    summary(r->jcts, n, &st->jct_mean_s, &st->jct_p50_s, &st->jct_p95_s, &st->jct_p99_s);
    st->bsld_mean = n ? bsld / n : 0;
    st->util = e->cap_gpu_s > 0 ? e->busy_gpu_s / e->cap_gpu_s : 0;
    st->useful_util = e->cap_gpu_s > 0 ? useful / e->cap_gpu_s : 0;
    st->idle_wait_gpu_h = e->idle_wait_gpu_s / 3600.0;
    st->cost_usd = e->cost_usd;
    st->cost_static_usd = e->cost_static_usd;
    st->lost_spot_gpu_h = e->lost_gpu_s[SIM_CAUSE_SPOT] / 3600.0;
    st->lost_preempt_gpu_h = e->lost_gpu_s[SIM_CAUSE_PREEMPT] / 3600.0;
}

const struct sim_stats *sim_result_stats(const struct sim_result *r)
{
    return &r->st;
}

enum sim_policy sim_result_policy(const struct sim_result *r)
{
    return r->policy;
}

int sim_result_samples(const struct sim_result *r, const struct sim_sample **out)
{
    *out = r->samples;
    return r->nsamples;
}

int sim_result_start_order(const struct sim_result *r, const int **out)
{
    *out = r->start_order;
    return r->nstarted;
}

const char *sim_outcome_name(enum sim_outcome o)
{
    switch (o) {
    case SIM_COMPLETED:
        return "completed";
    case SIM_TIMED_OUT:
        return "timed_out";
    case SIM_UNFINISHED:
        return "unfinished";
    case SIM_NEVER_FIT:
        return "never_fit";
    }
    return "?";
}

enum sim_outcome sim_result_job(const struct sim_result *r, int j, int64_t *start_s, int64_t *end_s)
{
    *start_s = r->first_start_ms[j] < 0 ? -1 : r->first_start_ms[j] / 1000;
    *end_s = r->end_ms[j] < 0 ? -1 : r->end_ms[j] / 1000;
    return (enum sim_outcome)r->outcome[j];
}

enum sim_outcome sim_result_job_ms(
    const struct sim_result *r, int j, int64_t *start_ms, int64_t *end_ms, int *capacity)
{
    *start_ms = r->first_start_ms[j];
    *end_ms = r->end_ms[j];
    *capacity = r->first_cap[j];
    return (enum sim_outcome)r->outcome[j];
}

int sim_result_job_attempts(const struct sim_result *r, int j, int64_t *last_start_ms)
{
    *last_start_ms = r->last_start_ms[j];
    return r->attempts[j];
}

int sim_result_jcts(const struct sim_result *r, const double **out)
{
    *out = r->jcts;
    return r->njcts;
}

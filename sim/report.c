/* SPDX-License-Identifier: MIT */
/*
 * The comparison as people and programs read it (sim.h): a table with one column per policy
 * (times as durations, money in dollars) and one JSON document with the same numbers in plain
 * units (seconds, GPU-hours, dollars), plus the trace's unused rows by reason.  One table of
 * rows drives both, so the two never disagree about what a number is.
 */
#include "sim/internal.h"

#include <stddef.h>
#include <string.h>

#include "common/mu_banned.h"

enum unit { U_COUNT, U_DURATION, U_RATIO, U_PERCENT, U_GPU_H, U_USD };

struct metric {
    const char *label; /* the table's */
    const char *key;   /* the JSON's */
    size_t off;        /* into struct sim_stats */
    bool is_int;
    enum unit unit;
};

#define M_INT(l, k, f)                                     \
    {                                                      \
        l, k, offsetof(struct sim_stats, f), true, U_COUNT \
    }
#define M_DBL(l, k, f, u)                             \
    {                                                 \
        l, k, offsetof(struct sim_stats, f), false, u \
    }

static const struct metric metrics[] = {
    M_INT("jobs", "jobs", jobs),
    M_INT("completed", "completed", completed),
    M_INT("timed out", "timed_out", timed_out),
    M_INT("unfinished", "unfinished", unfinished),
    M_INT("never fit the cluster", "never_fit", never_fit),
    M_DBL("makespan", "makespan_s", makespan_s, U_DURATION),
    M_DBL("JCT mean", "jct_mean_s", jct_mean_s, U_DURATION),
    M_DBL("JCT p50", "jct_p50_s", jct_p50_s, U_DURATION),
    M_DBL("JCT p95", "jct_p95_s", jct_p95_s, U_DURATION),
    M_DBL("JCT p99", "jct_p99_s", jct_p99_s, U_DURATION),
    M_DBL("queueing mean", "wait_mean_s", wait_mean_s, U_DURATION),
    M_DBL("queueing p50", "wait_p50_s", wait_p50_s, U_DURATION),
    M_DBL("queueing p95", "wait_p95_s", wait_p95_s, U_DURATION),
    M_DBL("queueing p99", "wait_p99_s", wait_p99_s, U_DURATION),
    M_DBL("bounded slowdown", "bounded_slowdown_mean", bsld_mean, U_RATIO),
    M_DBL("GPU utilisation", "gpu_utilisation", util, U_PERCENT),
    M_DBL("useful utilisation", "useful_utilisation", useful_util, U_PERCENT),
    M_DBL("idle GPU-h while waiting", "idle_gpu_h_while_waiting", idle_wait_gpu_h, U_GPU_H),
    M_DBL("cost (busy nodes)", "cost_usd", cost_usd, U_USD),
    M_DBL("cost (all nodes)", "cost_static_usd", cost_static_usd, U_USD),
    M_DBL("GPU-h lost to spot", "lost_spot_gpu_h", lost_spot_gpu_h, U_GPU_H),
    M_DBL("GPU-h lost to preemption", "lost_preempt_gpu_h", lost_preempt_gpu_h, U_GPU_H),
    M_INT("spot notices", "spot_notices", spot_notices),
    M_INT("gangs interrupted", "interruptions", interruptions),
    M_INT("preemptions", "preemptions", preemptions),
    M_INT("scheduling passes", "passes", passes),
};

static double metric_value(const struct sim_stats *st, const struct metric *m)
{
    const char *p = (const char *)st + m->off;
    int iv;
    double dv;
    if (m->is_int) {
        memcpy(&iv, p, sizeof(iv));
        return iv;
    }
    memcpy(&dv, p, sizeof(dv));
    return dv;
}

/* A cell of the table. */
static void cell(const struct metric *m, double v, char *out, size_t size)
{
    switch (m->unit) {
    case U_COUNT:
        (void)mu_snprintf(out, size, "%.0f", v);
        break;
    case U_DURATION:
        if (v < 60)
            (void)mu_snprintf(out, size, "%.0fs", v);
        else
            mu_duration_format((int64_t)(v + 0.5), out, size);
        break;
    case U_RATIO:
        (void)mu_snprintf(out, size, "%.2f", v);
        break;
    case U_PERCENT:
        (void)mu_snprintf(out, size, "%.1f%%", v * 100);
        break;
    case U_GPU_H:
        (void)mu_snprintf(out, size, "%.1f", v);
        break;
    case U_USD:
        (void)mu_snprintf(out, size, "$%.0f", v);
        break;
    }
}

int sim_report_table(struct sim_result *const *r, int n, struct mu_buf *out, struct mu_err *err)
{
    if (mu_buf_appendf(out, err, "%-26s", "") != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (mu_buf_appendf(out, err, " %12s", sim_policy_name(r[i]->policy)) != 0)
            return -1;
    if (mu_buf_append(out, "\n", 1, err) != 0)
        return -1;
    for (size_t k = 0; k < sizeof(metrics) / sizeof(metrics[0]); k++) {
        if (mu_buf_appendf(out, err, "%-26s", metrics[k].label) != 0)
            return -1;
        for (int i = 0; i < n; i++) {
            char c[32];
            cell(&metrics[k], metric_value(&r[i]->st, &metrics[k]), c, sizeof(c));
            if (mu_buf_appendf(out, err, " %12s", c) != 0)
                return -1;
        }
        if (mu_buf_append(out, "\n", 1, err) != 0)
            return -1;
    }
    return 0;
}

static int json_skips(const struct sim_trace *t, struct mu_buf *out, struct mu_err *err)
{
    if (mu_buf_appendf(out, err, "\"skipped\":[") != 0)
        return -1;
    for (int k = 0; k < sim_trace_skip_kinds(t); k++) {
        if (mu_buf_appendf(out, err, "%s{\"rows\":%d,\"first\":", k ? "," : "",
                           sim_trace_skip_count(t, k))
                != 0
            || mu_buf_append_json_str(out, sim_trace_skip_example(t, k), err) != 0
            || mu_buf_append(out, "}", 1, err) != 0)
            return -1;
    }
    return mu_buf_append(out, "]", 1, err);
}

int sim_report_json(const struct sim_trace *t,
                    struct sim_result *const *r,
                    int n,
                    struct mu_buf *out,
                    struct mu_err *err)
{
    if (mu_buf_appendf(out, err,
                       "{\"trace\":{\"format\":\"%s\",\"rows\":%d,\"jobs\":%d,\"rounded_up\":%d,",
                       sim_format_name(sim_trace_format(t)), sim_trace_rows(t), sim_trace_count(t),
                       sim_trace_rounded(t))
            != 0
        || json_skips(t, out, err) != 0 || mu_buf_append(out, "},\"policies\":[", 14, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (mu_buf_appendf(out, err, "%s{\"policy\":\"%s\"", i ? "," : "",
                           sim_policy_name(r[i]->policy))
            != 0)
            return -1;
        for (size_t k = 0; k < sizeof(metrics) / sizeof(metrics[0]); k++) {
            double v = metric_value(&r[i]->st, &metrics[k]);
            int rc = metrics[k].is_int
                         ? mu_buf_appendf(out, err, ",\"%s\":%.0f", metrics[k].key, v)
                         : mu_buf_appendf(out, err, ",\"%s\":%.6g", metrics[k].key, v);
            if (rc != 0)
                return -1;
        }
        if (mu_buf_appendf(out, err, ",\"events\":%lld}", (long long)r[i]->st.events) != 0)
            return -1;
    }
    return mu_buf_append(out, "]}\n", 3, err);
}

/* ms as seconds: "12" when whole, "12.345" otherwise, "-1" for none. */
static void secs(int64_t ms, char *out, size_t size)
{
    if (ms < 0)
        (void)mu_snprintf(out, size, "-1");
    else if (ms % 1000 == 0)
        (void)mu_snprintf(out, size, "%lld", (long long)(ms / 1000));
    else
        (void)mu_snprintf(out, size, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

int sim_report_jobs(const struct sim_trace *t,
                    struct sim_result *const *r,
                    int n,
                    struct mu_buf *out,
                    struct mu_err *err)
{
    const struct sim_job *jobs = sim_trace_jobs(t);
    if (mu_buf_appendf(
            out, err, "policy,line,submit_s,start_s,end_s,outcome,capacity,attempts,last_start_s\n")
        != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < sim_trace_count(t); j++) {
            int64_t start, end, last;
            int cap;
            char sub[32], st[32], en[32], la[32];
            enum sim_outcome o = sim_result_job_ms(r[i], j, &start, &end, &cap);
            int attempts = sim_result_job_attempts(r[i], j, &last);
            secs(jobs[j].submit_ms, sub, sizeof(sub));
            secs(start, st, sizeof(st));
            secs(end, en, sizeof(en));
            secs(last, la, sizeof(la));
            if (mu_buf_appendf(out, err, "%s,%d,%s,%s,%s,%s,%s,%d,%s\n",
                               sim_policy_name(sim_result_policy(r[i])), jobs[j].line, sub, st, en,
                               sim_outcome_name(o),
                               cap == SCHED_SPOT        ? "spot"
                               : cap == SCHED_ON_DEMAND ? "on-demand"
                                                        : "",
                               attempts, la)
                != 0)
                return -1;
        }
    }
    return 0;
}

int sim_report_skips(const struct sim_trace *t, struct mu_buf *out, struct mu_err *err)
{
    if (mu_buf_appendf(out, err, "trace: %s layout, %d rows, %d jobs used",
                       sim_format_name(sim_trace_format(t)), sim_trace_rows(t), sim_trace_count(t))
        != 0)
        return -1;
    if (sim_trace_rounded(t) > 0
        && mu_buf_appendf(out, err, " (%d rounded up to whole GPUs or nodes)", sim_trace_rounded(t))
               != 0)
        return -1;
    if (mu_buf_append(out, "\n", 1, err) != 0)
        return -1;
    for (int k = 0; k < sim_trace_skip_kinds(t); k++)
        if (mu_buf_appendf(out, err, "trace: %d rows not used, e.g. %s\n",
                           sim_trace_skip_count(t, k), sim_trace_skip_example(t, k))
            != 0)
            return -1;
    return 0;
}

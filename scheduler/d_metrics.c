/* SPDX-License-Identifier: MIT */
/*
 * Layer 5 of musterd (d_loop.h): the Prometheus endpoint (docs/design.md §9).
 *
 * Counters (d_io.c) are raised in the same Redis round trip as the job update they count (HINCRBY
 * on <prefix>counters, see queue_job_update), and loaded back at start, so they never go backwards
 * across a restart.  Gauges (jobs by state, pending GPUs, free GPUs) are computed from memory at
 * scrape time.  The HTTP server is libmicrohttpd in epoll mode without threads of its own: its
 * epoll fd sits in the daemon's zmq_poll set and requests are answered on the loop thread, so
 * nothing here needs a lock.
 */
#include "scheduler/d_loop.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* ---- exposition ---- */

/* Label values escaped as the text format requires: backslash, quote, newline. */
static int label(struct mu_buf *b, const char *value, struct mu_err *err)
{
    for (const char *p = value; *p; p++) {
        const char *out = NULL;
        if (*p == '\\')
            out = "\\\\";
        else if (*p == '"')
            out = "\\\"";
        else if (*p == '\n')
            out = "\\n";
        if (out ? mu_buf_append(b, out, 2, err) : mu_buf_append(b, p, 1, err))
            return -1;
    }
    return 0;
}

static int head(
    struct mu_buf *b, const char *name, const char *type, const char *help, struct mu_err *err)
{
    return mu_buf_appendf(b, err, "# HELP muster_%s %s\n# TYPE muster_%s %s\n", name, help, name,
                          type);
}

/* name{k1="v1",k2="v2"} value */
static int sample(struct mu_buf *b,
                  const char *name,
                  const char *k1,
                  const char *v1,
                  const char *k2,
                  const char *v2,
                  double value,
                  struct mu_err *err)
{
    if (mu_buf_appendf(b, err, "muster_%s", name) != 0)
        return -1;
    if (k1) {
        if (mu_buf_appendf(b, err, "{%s=\"", k1) != 0 || label(b, v1, err) != 0)
            return -1;
        if (k2 && (mu_buf_appendf(b, err, "\",%s=\"", k2) != 0 || label(b, v2, err) != 0))
            return -1;
        if (mu_buf_append(b, "\"}", 2, err) != 0)
            return -1;
    }
    return mu_buf_appendf(b, err, " %.17g\n", value);
}

/* A metric of one sample without labels. */
static int single(struct mu_buf *b,
                  const char *name,
                  const char *type,
                  const char *help,
                  double value,
                  struct mu_err *err)
{
    if (head(b, name, type, help, err) != 0
        || sample(b, name, NULL, NULL, NULL, NULL, value, err) != 0)
        return -1;
    return 0;
}

/* The scheduling passes' figures since this musterd started (they start again with it). */
static int render_passes(const struct musterd *d, struct mu_buf *b, struct mu_err *err)
{
    const struct {
        const char *name;
        const char *help;
        double value;
    } passes[] = {
        { "scheduling_passes", "Scheduling passes since this musterd started.",
          (double)d->metrics.passes },
        { "scheduling_pass_seconds",
          "Time those passes took, all told (their Redis writes included).",
          d->metrics.pass_sum_s },
        { "scheduling_pass_core_seconds",
          "Of that, the time in the placement core (what grows with the pending jobs).",
          d->metrics.pass_core_sum_s },
        { "scheduling_pass_write_seconds",
          "Of that, the time waiting for Redis to take the passes' writes (one round trip a "
          "pass: its starts and reasons).",
          d->metrics.pass_write_sum_s },
        { "scheduling_pass_cpu_seconds",
          "CPU time those passes took in musterd's thread: what is left of their time was spent "
          "waiting, for Redis or for a CPU.",
          d->metrics.pass_cpu_sum_s },
        { "scheduling_pass_jobs",
          "Pending jobs the last scheduling pass looked at (an array's elements not made yet "
          "and jobs waiting for dependencies are not among them).",
          (double)d->metrics.pass_jobs },
        { "scheduling_passes_stopped",
          "Of the passes, those that stopped before the end of a queue of over 1,000 jobs, once "
          "no later job could start, take the reservation or preempt (every 10 s a sweep "
          "refreshes the later jobs' reasons, up to 4,096 jobs or 3 ms in each such pass that "
          "starts no gang).",
          (double)d->metrics.passes_stopped },
        { "scheduling_pass_stopped_seconds",
          "Of scheduling_pass_seconds, the time of the passes that stopped early.",
          d->metrics.pass_stopped_sum_s },
    };

    for (size_t i = 0; i < MU_ARRAY_LEN(passes); i++) {
        if (single(b, passes[i].name, "gauge", passes[i].help, passes[i].value, err) != 0)
            return -1;
    }
    return 0;
}

/* name{le="…"} of counts[0..n] (non-cumulative, the last +Inf; le(i) the bounds), cumulative;
 * *total gets the count. */
static int buckets(struct mu_buf *b,
                   const char *name,
                   const double *counts,
                   int n,
                   double (*le)(int),
                   double *total,
                   struct mu_err *err)
{
    *total = 0;
    for (int i = 0; i <= n; i++) {
        char bound[32];
        *total += counts[i];
        if (i < n)
            (void)mu_snprintf(bound, sizeof(bound), "%g", le(i));
        else
            mu_strlcpy(bound, "+Inf", sizeof(bound));
        if (sample(b, name, "le", bound, NULL, NULL, *total, err) != 0)
            return -1;
    }
    return 0;
}

/* The consolidation signal (issue #16): releasable nodes per pool, and each node's idle time. */
static int render_releasable(const struct musterd *d, struct mu_buf *b, struct mu_err *err)
{
    uint64_t now_ms = mu_time_wall_ms();

    if (head(b, "releasable_nodes", "gauge",
             "Nodes an autoscaler may remove, by pool: online, no spot notice, and no task for "
             "consolidate_after_s.",
             err)
        != 0)
        return -1;
    for (int p = 0; p < d->cfg.npools; p++) {
        int n = 0;
        for (int i = 0; i < d->nnodes; i++)
            n += strcmp(d->nodes[i].pool, d->cfg.pools[p].name) == 0
                 && d_node_releasable(d, &d->nodes[i], now_ms);
        if (sample(b, "releasable_nodes", "pool", d->cfg.pools[p].name, NULL, NULL, n, err) != 0)
            return -1;
    }
    if (head(b, "node_idle_seconds", "gauge",
             "Seconds since the last task on each online node ended (0 while one runs).", err)
        != 0)
        return -1;
    for (int i = 0; i < d->nnodes; i++) {
        const struct d_node *node = &d->nodes[i];
        uint64_t since = node->idle_since_ms;
        if (!node->online)
            continue;
        if (sample(b, "node_idle_seconds", "node", node->name, "pool", node->pool,
                   since && now_ms > since ? (double)(now_ms - since) / 1000.0 : 0, err)
            != 0)
            return -1;
    }
    return 0;
}

/* The counters, then the placement-latency histogram: what only grows while musterd runs. */
static int render_counters(const struct musterd *d, struct mu_buf *b, struct mu_err *err)
{
    static const char *const help[D_COUNTER_COUNT] = {
        /* NOLINTNEXTLINE(bugprone-suspicious-missing-comma): one text on two lines, as below */
        "Jobs taken in that can run: each valid submission, and each element of a job array as "
        "musterd makes it, never the array itself (rejected submissions are counted in "
        "muster_jobs_rejected_total, not here; duplicates of an idempotency key in neither). Once "
        "every job has ended it equals succeeded + failed + cancelled + timeout.",
        "Submissions rejected as invalid (an array as one).",
        "Jobs that succeeded (array elements each, never the array itself).",
        "Jobs that failed after their retries (array elements each, never the array itself).",
        "Jobs cancelled, by an operator or a dependency never met (array elements each, never the "
        "array itself).",
        "Gang attempts rerun after a task failed.",
        "Gang attempts requeued without counting a failure (node lost, bind timeout, a node "
        "refusing a task, drain, scheduler restart).",
        "Gangs preempted for higher-priority work.",
        "Spot interruption notices received.",
        "Nodes declared lost after missing heartbeats.",
        "Jobs stopped at their time limit (state TIMEOUT; array elements each).",
        "Gangs moved from on-demand back to spot after a checkpoint.",
    };
    double cumulative = 0;

    for (int c = 0; c < D_COUNTER_COUNT; c++) {
        char name[64];
        (void)mu_snprintf(name, sizeof(name), "%s_total", d_counter_name((enum d_counter)c));
        if (single(b, name, "counter", help[c], d->metrics.counters[c], err) != 0)
            return -1;
    }
    if (single(b, "lost_gpu_seconds_total", "counter",
               "GPU-seconds of work lost when gang attempts ended without finishing.",
               d->metrics.lost_gpu_seconds, err)
        != 0)
        return -1;
    if (head(b, "placement_latency_seconds", "histogram", "Time to compute a gang's placement.",
             err)
        != 0)
        return -1;
    if (buckets(b, "placement_latency_seconds_bucket", d->metrics.place_buckets, D_PLACE_BUCKETS,
                d_bucket_le, &cumulative, err)
        != 0)
        return -1;
    if (sample(b, "placement_latency_seconds_sum", NULL, NULL, NULL, NULL, d->metrics.place_sum_s,
               err)
            != 0
        || sample(b, "placement_latency_seconds_count", NULL, NULL, NULL, NULL, cumulative, err))
        return -1;
    /* Not a histogram: it starts again with musterd, as the other pass figures do, where the
     * counters above never go backwards (they are kept in Redis). */
    if (head(b, "scheduling_passes_by_duration", "gauge",
             "Scheduling passes since this musterd started that took at most le seconds "
             "(cumulative, as a histogram's buckets).",
             err)
            != 0
        || buckets(b, "scheduling_passes_by_duration", d->metrics.pass_buckets, D_PASS_BUCKETS,
                   d_pass_bucket_le, &cumulative, err)
               != 0)
        return -1;
    return render_passes(d, b, err);
}

/* One gauge of one sample per configured queue: the int64_t at `field` of its d_queue_stats. */
static int per_queue(const struct musterd *d,
                     const struct d_gauges *g,
                     const char *name,
                     const char *help,
                     size_t field,
                     struct mu_buf *b,
                     struct mu_err *err)
{
    if (head(b, name, "gauge", help, err) != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        const int64_t *v = (const int64_t *)(const void *)((const char *)&g->queues[q] + field);
        if (sample(b, name, "queue", d->cfg.queues[q].name, NULL, NULL, (double)*v, err) != 0)
            return -1;
    }
    return 0;
}

/* Quotas (issue #11): each limited queue's nominal GPUs and all queues' use, by capacity type,
 * the GPUs of gangs running on borrowed quota, and the idle quota lent to them. */
static int render_quota(const struct musterd *d,
                        const struct d_gauges *g,
                        struct mu_buf *b,
                        struct mu_err *err)
{
    static const char *const caps[] = { "spot", "on-demand" };
    if (head(b, "queue_quota_gpus", "gauge",
             "Each queue's nominal quota in GPUs, by capacity type (queues with a quota only).",
             err)
        != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        for (int c = 0; c < 2 && d->cfg.queues[q].has_quota; c++) {
            if (sample(b, "queue_quota_gpus", "queue", d->cfg.queues[q].name, "capacity", caps[c],
                       d->cfg.queues[q].quota[c], err)
                != 0)
                return -1;
        }
    }
    if (head(b, "queue_used_gpus", "gauge",
             "GPUs held by each queue's placed gangs, by capacity type.", err)
        != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        for (int c = 0; c < 2; c++) {
            if (sample(b, "queue_used_gpus", "queue", d->cfg.queues[q].name, "capacity", caps[c],
                       (double)g->queues[q].used_gpus[c], err)
                != 0)
                return -1;
        }
    }
    if (per_queue(d, g, "queue_borrowed_gpus",
                  "GPUs held by each queue's gangs that started on quota borrowed from its cohort.",
                  offsetof(struct d_queue_stats, borrowed_gpus), b, err)
            != 0
        || per_queue(d, g, "queue_lent_gpus",
                     "GPUs of each queue's idle quota that its cohort's borrowers use.",
                     offsetof(struct d_queue_stats, lent_gpus), b, err)
               != 0)
        return -1;
    return 0;
}

/* The gauges, from g, the config and the node table. */
/* MIG slices by pool and profile (issue #17): pending demand for the autoscaler, free, used. */
static int render_slices(const struct musterd *d,
                         const struct d_gauges *g,
                         struct mu_buf *b,
                         struct mu_err *err)
{
    int count = sched_cluster_profile_count(d->cluster);

    if (count == 0)
        return 0;
    if (head(b, "pending_gpu_slices", "gauge",
             "MIG slices asked for by pending jobs, by profile and by the pool each would go to "
             "first (as pending_gpus, which does not count them); pool=\"none\" when no pool "
             "can grow for it.",
             err)
        != 0)
        return -1;
    for (int id = 1; id <= count && id <= SCHED_MAX_PROFILES; id++) {
        for (int p = 0; p <= d->cfg.npools; p++) {
            if (g->pending_slices[p][id] == 0)
                continue;
            if (sample(b, "pending_gpu_slices", "pool",
                       p < d->cfg.npools ? d->cfg.pools[p].name : "none", "profile",
                       sched_cluster_profile_name(d->cluster, id), (double)g->pending_slices[p][id],
                       err)
                != 0)
                return -1;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *name = k == 0 ? "gpu_slices_free" : "gpu_slices_used";
        if (head(b, name, "gauge",
                 k == 0 ? "Free MIG slices of online nodes, by pool and profile."
                        : "MIG slices of online nodes given to tasks, by pool and profile.",
                 err)
            != 0)
            return -1;
        for (int p = 0; p < d->cfg.npools; p++) {
            for (int id = 1; id <= count && id <= SCHED_MAX_PROFILES; id++) {
                double v = k == 0 ? g->slices_free[p][id] : g->slices_used[p][id];
                if (g->slices_free[p][id] + g->slices_used[p][id] == 0)
                    continue;
                if (sample(b, name, "pool", d->cfg.pools[p].name, "profile",
                           sched_cluster_profile_name(d->cluster, id), v, err)
                    != 0)
                    return -1;
            }
        }
    }
    return 0;
}

static int render_gauges(const struct musterd *d,
                         const struct d_gauges *g,
                         struct mu_buf *b,
                         struct mu_err *err)
{
    if (head(b, "jobs", "gauge",
             "Jobs not yet finished, by state and queue (an array's elements once made, never the "
             "array itself).",
             err)
        != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        for (int s = 0; s < D_ACTIVE_STATES; s++) {
            if (sample(b, "jobs", "queue", d->cfg.queues[q].name, "state",
                       queue_state_name((enum queue_state)s), g->jobs[q][s], err)
                != 0)
                return -1;
        }
    }
    if (head(b, "queue_usage_gpu_seconds", "gauge",
             "Each queue's GPU-seconds used, decayed by fair_share_half_life_s (the fair-share "
             "order's usage; docs/fair-share.md), as of the last status write.",
             err)
        != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        if (sample(b, "queue_usage_gpu_seconds", "queue", d->cfg.queues[q].name, NULL, NULL,
                   d->usage.gpu_s[q], err)
            != 0)
            return -1;
    }
    if (render_quota(d, g, b, err) != 0)
        return -1;
    if (head(b, "pending_gpus", "gauge",
             "GPUs asked for by pending jobs, by queue and by the pool each would go to first: "
             "the cheapest pool of its first capacity type that has its GPU type, is not cooling "
             "down and whose max_gpus cap leaves room for it; pool=\"none\" when no pool can "
             "grow for it (the autoscaling signal).",
             err)
        != 0)
        return -1;
    for (int q = 0; q < d->cfg.nqueues; q++) {
        for (int p = 0; p <= d->cfg.npools; p++) {
            const char *pool = p < d->cfg.npools ? d->cfg.pools[p].name : "none";
            if (g->pending_gpus[q][p] == 0 && p == d->cfg.npools)
                continue;
            if (sample(b, "pending_gpus", "queue", d->cfg.queues[q].name, "pool", pool,
                       (double)g->pending_gpus[q][p], err)
                != 0)
                return -1;
        }
    }
    if (render_slices(d, g, b, err) != 0)
        return -1;
    if (head(b, "gpus", "gauge", "GPUs of ready and busy nodes, by pool and state.", err) != 0)
        return -1;
    for (int p = 0; p < d->cfg.npools; p++) {
        if (sample(b, "gpus", "pool", d->cfg.pools[p].name, "state", "free", g->gpus_free[p], err)
                != 0
            || sample(b, "gpus", "pool", d->cfg.pools[p].name, "state", "used", g->gpus_used[p],
                      err)
                   != 0)
            return -1;
    }
    if (render_releasable(d, b, err) != 0)
        return -1;
    if (head(b, "nodes", "gauge", "Registered nodes by pool (online ones).", err) != 0)
        return -1;
    for (int p = 0; p < d->cfg.npools; p++) {
        if (sample(b, "nodes", "pool", d->cfg.pools[p].name, NULL, NULL, g->nodes[p], err) != 0)
            return -1;
    }
    return 0;
}

int d_metrics_render(struct musterd *d, struct mu_buf *b, struct mu_err *err)
{
    struct d_gauges g;

    d_jobs_gauges(d, &g);
    if (render_counters(d, b, err) != 0 || render_gauges(d, &g, b, err) != 0)
        return -1;
    return 0;
}

/* ---- HTTP ---- */

static enum MHD_Result answer(struct MHD_Connection *conn,
                              unsigned int status,
                              char *body,
                              size_t len,
                              enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    enum MHD_Result rc;
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    (void)MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* The type is libmicrohttpd's MHD_AccessHandlerCallback, so upload_data_size stays non-const.
 * NOLINTBEGIN(readability-non-const-parameter) */
static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **con_cls)
{
    static char not_found[] = "not found; metrics are at /metrics\n";
    static char bad_method[] = "method not allowed; use GET\n";
    struct musterd *d = cls;
    struct mu_buf b;
    struct mu_err err;
    size_t len;

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, bad_method, sizeof(bad_method) - 1,
                      MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return answer(conn, MHD_HTTP_NOT_FOUND, not_found, sizeof(not_found) - 1,
                      MHD_RESPMEM_PERSISTENT);
    mu_buf_init(&b, 16u << 20);
    if (d_metrics_render(d, &b, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "metrics", 10, "cannot render /metrics: %s", err.msg);
        mu_buf_release(&b);
        return MHD_NO;
    }
    len = b.len;
    return answer(conn, MHD_HTTP_OK, mu_buf_take(&b), len, MHD_RESPMEM_MUST_FREE);
}
/* NOLINTEND(readability-non-const-parameter) */

int d_metrics_start(struct musterd *d, const char *addr_port, struct mu_err *err)
{
    struct sockaddr_in sa;
    char host[64];
    const char *colon = strrchr(addr_port, ':');
    int64_t port = 0;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    if (!colon || (size_t)(colon - addr_port) >= sizeof(host)
        || mu_parse_i64(colon + 1, 1, 65535, &port, NULL) != 0)
        return mu_errf(err, MU_E_USAGE, "--metrics '%s': expected ADDR:PORT, e.g. 127.0.0.1:9464",
                       addr_port);
    memcpy(host, addr_port, (size_t)(colon - addr_port));
    host[colon - addr_port] = '\0';
    if (!host[0] || strcmp(host, "*") == 0)
        mu_strlcpy(host, "0.0.0.0", sizeof(host));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return mu_errf(err, MU_E_USAGE, "--metrics '%s': '%s' is not an IPv4 address", addr_port,
                       host);
    sa.sin_port = htons((uint16_t)port);
    d->mhd =
        MHD_start_daemon(MHD_USE_EPOLL, (uint16_t)port, NULL, NULL, on_request, d,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
                         64u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!d->mhd)
        return mu_errf(err, MU_E_SYS, "--metrics: cannot serve on %s (address in use?)", addr_port);
    mu_log(MU_LOG_INFO, "sched", "metrics on http://%s/metrics", addr_port);
    return 0;
}

int d_metrics_fd(const struct musterd *d)
{
    const union MHD_DaemonInfo *info;
    if (!d->mhd)
        return -1;
    info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

void d_metrics_run(struct musterd *d)
{
    if (d->mhd)
        (void)MHD_run(d->mhd);
}

void d_metrics_stop(struct musterd *d)
{
    if (d->mhd)
        MHD_stop_daemon(d->mhd);
    d->mhd = NULL;
}

/* SPDX-License-Identifier: MIT */
/*
 * Layer 5 of musterd (d_loop.h): what musterd shows.  The status hashes (<prefix>nodes, pools and
 * queues) that musterctl and dashboards read, refreshed once a heartbeat and at once after a
 * change; and the gauges the metrics endpoint computes at scrape time.  Read-only over the
 * records.
 *
 * <prefix>nodes gets only the entries that changed (issue #15: 20,000 nodes heartbeating once a
 * second must not mean 20,000 entries, megabytes, written every second).  Each node keeps the sum
 * of what its last entry showed (node_sum: the numbers and texts node_json prints, not the text
 * itself), and an entry is formatted only when that sum moved, so a write costs a sum per node
 * and the text of the changed ones.  The heartbeat_at an entry shows moves on only when it is a
 * third of node_lost_after_s old, so a live node's entry is rewritten that often, and a silent
 * one's age grows until musterd marks it lost (a change, written at once).  After Redis comes
 * back every entry is written again (d_status_rewrite): a failed-over primary may have lost any
 * of them.  A node an operator forgot (musterctl node forget) has no entry until it registers
 * again.
 */

#include "scheduler/d_loop.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_pass.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* Appends to per_node[i] the JSON strings ("id",...) of the jobs with a live task on node i. */
static int jobs_by_node(struct musterd *d, struct mu_buf *per_node, struct mu_err *err)
{
    struct d_job *j;

    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            struct mu_buf *b = &per_node[j->slots[t].node];
            bool seen = false;
            for (int u = 0; u < t && !seen; u++)
                seen = j->slots[u].node == j->slots[t].node && !j->tasks[u].gone;
            if (seen || j->tasks[t].gone)
                continue;
            if ((b->len && mu_buf_append(b, ",", 1, err) != 0)
                || mu_buf_append_json_str(b, j->id, err) != 0)
                return -1;
        }
    }
    return 0;
}

/* Each queue's lent GPUs from what every queue uses (the core's sched_quota_lent). */
static void lent_count(const struct musterd *d, struct d_queue_stats *stats)
{
    struct sched_quota_queue qs[SCHED_MAX_QUEUES];
    int nq = d->cfg.nqueues + 1;

    d_quota_queues(d, qs);
    for (int q = 0; q < nq; q++) {
        qs[q].used[SCHED_SPOT] = (int)stats[q].used_gpus[SCHED_SPOT];
        qs[q].used[SCHED_ON_DEMAND] = (int)stats[q].used_gpus[SCHED_ON_DEMAND];
    }
    for (int q = 0; q < nq; q++)
        stats[q].lent_gpus =
            sched_quota_lent(qs, nq, q, SCHED_SPOT) + sched_quota_lent(qs, nq, q, SCHED_ON_DEMAND);
}

/* Counts j in its queue's statistics.  An array is no job here (its made elements are, as in the
 * counters): a RUNNING array counted its elements' GPUs once more. */
static void job_count(struct musterd *d, struct d_queue_stats *stats, const struct d_job *j)
{
    struct d_queue_stats *st = &stats[j->queue_idx]; /* nqueues: no longer configured */
    int64_t gpus = (int64_t)j->spec.tasks * j->spec.gpus_per_task;
    int cap;

    if (j->array)
        return;
    if (j->state == QUEUE_PENDING) {
        st->pending_jobs++;
        st->pending_gpus += j->deps_open ? 0 : gpus; /* demand: its own */
        if (!st->oldest_pending_ms || j->submitted_ms < st->oldest_pending_ms)
            st->oldest_pending_ms = j->submitted_ms;
    } else if (j->state == QUEUE_STARTING || j->state == QUEUE_RUNNING
               || j->state == QUEUE_PREEMPTING) {
        st->running_jobs++;
        st->running_gpus += gpus;
    }
    cap = j->placed ? d_job_capacity(d, j) : -1;
    if (cap >= 0) {
        st->used_gpus[cap] += gpus;
        st->borrowed_gpus += j->borrowed ? gpus : 0;
    }
}

/* How many jobs ahead of the one counted its record is asked for: each record is a cache miss
 * (100,000 of them at each status write), and misses asked for early overlap. */
#define STATS_AHEAD 16

/* The next job of the table, its record asked for (NULL at the end, and after). */
static struct d_job *job_fetch(const struct musterd *d, size_t *pos)
{
    struct d_job *j = mu_map_next(d->jobs, pos);
    if (j) {
        __builtin_prefetch(&j->state);      /* its line of its own (struct d_job) */
        __builtin_prefetch(&j->spec.tasks); /* and gpus_per_task */
    }
    return j;
}

/* The pool a pending job would go to first: the cheapest pool of its first capacity type that
 * has its GPU type and enough GPUs per node, is not cooling down after a spot interruption, and
 * whose max_gpus cap leaves room for the gang (growing any other pool would not help it); npools
 * when none does. */
static int first_pool(const struct musterd *d, const struct d_job *j, int64_t now_s)
{
    int64_t gpus = (int64_t)j->spec.tasks * j->spec.gpus_per_task;
    int best = d->cfg.npools;
    for (int c = 0; c < j->spec.ncapacity && best == d->cfg.npools; c++) {
        for (int p = 0; p < d->cfg.npools; p++) {
            const struct cfg_pool *pool = &d->cfg.pools[p];
            bool slices = j->req.slice_profile > 0; /* no GPUs per node or cap to check */
            if (j->spec.gpu_milli > 0 && !pool->shared)
                continue;
            if (pool->capacity != j->spec.capacity[c]
                || (!slices && pool->gpus_per_node < j->spec.gpus_per_task)
                || (j->spec.gpu_type[0] && strcmp(pool->gpu_type, j->spec.gpu_type) != 0)
                || sched_cluster_pool_cooldown_until(d->cluster, p) > now_s
                || (!slices && pool->max_gpus > 0
                    && pool->max_gpus - sched_cluster_pool_gpus_used(d->cluster, p) < gpus))
                continue;
            if (best == d->cfg.npools || pool->price_per_hour < d->cfg.pools[best].price_per_hour)
                best = p;
        }
    }
    return best;
}

/* Counts active job j in the scrape-time gauges: jobs by queue and state, and what a pending one
 * asks for, by the pool it would go to first.  An array is no job here (its made elements are),
 * as in the counters (d_array.c). */
static void job_gauge(const struct musterd *d,
                      struct d_gauges *g,
                      const struct d_job *j,
                      int64_t now_s)
{
    int q = j->queue_idx; /* nqueues: no longer configured */
    if (q >= d->cfg.nqueues || (int)j->state >= D_ACTIVE_STATES || j->array)
        return;
    g->jobs[q][j->state] += 1;
    if (j->state != QUEUE_PENDING || j->deps_open)
        return;
    if (j->req.slice_profile > 0 && j->req.slice_profile <= SCHED_MAX_PROFILES)
        g->pending_slices[first_pool(d, j, now_s)][j->req.slice_profile] +=
            (int64_t)j->spec.tasks * j->spec.gpus_per_task;
    else if (j->spec.gpu_milli > 0) /* shares: the GPUs they add up to */
        g->pending_gpus[q][first_pool(d, j, now_s)] +=
            ((int64_t)j->spec.tasks * j->spec.gpu_milli + SCHED_MILLI - 1) / SCHED_MILLI;
    else
        g->pending_gpus[q][first_pool(d, j, now_s)] +=
            (int64_t)j->spec.tasks * j->spec.gpus_per_task;
}

/* The queues' statistics, in one walk over the jobs; with g, the scrape's gauges of the jobs too
 * (zeroed by the caller). */
static void queue_stats(struct musterd *d, struct d_queue_stats *stats, struct d_gauges *g)
{
    struct d_job *ahead[STATS_AHEAD]; /* a ring, in table order; the first NULL is the end */
    int64_t now_s = (int64_t)(mu_time_wall_ms() / 1000);
    size_t pos = 0;

    memset(stats, 0, sizeof(*stats) * (size_t)(d->cfg.nqueues + 1));
    for (int i = 0; i < STATS_AHEAD; i++)
        ahead[i] = job_fetch(d, &pos);
    for (int i = 0; ahead[i]; i = (i + 1) % STATS_AHEAD) {
        const struct d_job *j = ahead[i];
        ahead[i] = job_fetch(d, &pos);
        job_count(d, stats, j);
        if (g)
            job_gauge(d, g, j, now_s);
    }
    lent_count(d, stats);
}

/*
 * ,"slices":{"1g.10gb":{"free":5,"total":7},…}: the MIG slices by profile of node (or, node -1,
 * of the online nodes of pool), nothing when there are none (issue #17).  One scan of the nodes.
 */
static int slices_json(
    const struct musterd *d, int node, const char *pool, struct mu_buf *b, struct mu_err *err)
{
    int count = sched_cluster_profile_count(d->cluster);
    int free_sum[SCHED_MAX_PROFILES + 1] = { 0 };
    int total_sum[SCHED_MAX_PROFILES + 1] = { 0 };
    bool any = false;

    if (count == 0)
        return 0;
    for (int i = node >= 0 ? node : 0; i < (node >= 0 ? node + 1 : d->nnodes); i++) {
        if (node < 0 && (!d->nodes[i].online || strcmp(d->nodes[i].pool, pool) != 0))
            continue;
        for (int id = 1; id <= count; id++) {
            int f;
            int t;
            sched_cluster_node_slices(d->cluster, i, id, &f, &t);
            free_sum[id] += f;
            total_sum[id] += t;
        }
    }
    for (int id = 1; id <= count; id++) {
        if (total_sum[id] == 0)
            continue;
        if (mu_buf_append(b, any ? "," : ",\"slices\":{", any ? 1 : 11, err) != 0
            || mu_buf_append_json_str(b, sched_cluster_profile_name(d->cluster, id), err) != 0
            || mu_buf_appendf(b, err, ":{\"free\":%d,\"total\":%d}", free_sum[id], total_sum[id])
                   != 0)
            return -1;
        any = true;
    }
    return any ? mu_buf_append(b, "}", 1, err) : 0;
}

/* ,"gpu_milli":[0,500,…]: a node of a shared pool's GPU shares in use, per GPU (issue #17). */
static int milli_json(const struct musterd *d,
                      int i,
                      const struct sched_node_spec *spec,
                      struct mu_buf *b,
                      struct mu_err *err)
{
    bool first = true;
    if (!sched_cluster_pool(d->cluster, spec->pool)->shared)
        return 0;
    if (mu_buf_append(b, ",\"gpu_milli\":[", 14, err) != 0)
        return -1;
    for (int g = 0; g < spec->ngpus; g++) {
        if (spec->unit[g] != SCHED_UNIT_GPU)
            continue;
        if (mu_buf_appendf(b, err, "%s%d", first ? "" : ",",
                           sched_cluster_gpu_milli(d->cluster, i, g))
            != 0)
            return -1;
        first = false;
    }
    return mu_buf_append(b, "]", 1, err);
}

/* The heartbeat_at node's entry shows: the one it showed, until that is hb_refresh_ms old. */
static uint64_t shown_heartbeat(const struct d_node *node, uint64_t hb_refresh_ms)
{
    if (node->status_sum && node->seen_wall_ms >= node->status_hb_ms
        && node->seen_wall_ms - node->status_hb_ms < hb_refresh_ms)
        return node->status_hb_ms;
    return node->seen_wall_ms;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    return mu_hash_more(h, s, strlen(s) + 1); /* with its NUL: "ab","c" is not "a","bc" */
}

/*
 * The sum of everything node i's entry shows: node_json prints these and nothing else, so a field
 * added there is added here.  Equal sums, equal entries, found without formatting 20,000 entries
 * to learn which few changed.  Never 0 ("not written").
 */
static uint64_t node_sum(const struct musterd *d,
                         int i,
                         const struct mu_buf *jobs,
                         uint64_t heartbeat_ms,
                         bool releasable)
{
    const struct d_node *node = &d->nodes[i];
    const struct sched_node_spec *spec = sched_cluster_node_spec(d->cluster, i);
    const struct sched_pool *pool = sched_cluster_pool(d->cluster, spec->pool);
    const int64_t nums[] = { pool->capacity,
                             sched_cluster_node_state(d->cluster, i),
                             sched_cluster_node_gpus_total(d->cluster, i),
                             sched_cluster_node_gpus_free(d->cluster, i),
                             spec->cpus,
                             spec->memory_mb,
                             (int64_t)heartbeat_ms,
                             (int64_t)node->idle_since_ms,
                             node->at_risk,
                             releasable,
                             pool->shared,
                             d->cfg.nlevels };
    int profiles = sched_cluster_profile_count(d->cluster);
    uint64_t h = mu_hash_more(MU_HASH_START, nums, sizeof(nums));

    h = mu_hash_more(h, jobs->data ? jobs->data : "", jobs->len);
    h = hash_str(hash_str(hash_str(h, node->name), node->pool), node->addr);
    h = hash_str(hash_str(hash_str(h, node->reason), node->instance_id), node->confinement);
    h = hash_str(hash_str(hash_str(h, node->reason), node->instance_id), node->warning);
    for (int l = 0; l < d->cfg.nlevels; l++)
        h = hash_str(hash_str(h, d->cfg.levels[l]), spec->labels[l]);
    for (int id = 1; id <= profiles; id++) {
        int ft[2];
        sched_cluster_node_slices(d->cluster, i, id, &ft[0], &ft[1]);
        h = hash_str(mu_hash_more(h, ft, sizeof(ft)), sched_cluster_profile_name(d->cluster, id));
    }
    for (int g = 0; pool->shared && g < spec->ngpus; g++) {
        int milli =
            spec->unit[g] == SCHED_UNIT_GPU ? sched_cluster_gpu_milli(d->cluster, i, g) : -1;
        h = mu_hash_more(h, &milli, sizeof(milli));
    }
    return h ? h : 1;
}

/* Node i's entry, appended to b: what node_sum sums. */
static int node_json(const struct musterd *d,
                     int i,
                     const struct mu_buf *jobs,
                     uint64_t heartbeat_ms,
                     bool releasable,
                     struct mu_buf *b,
                     struct mu_err *err)
{
    const struct d_node *node = &d->nodes[i];
    const struct sched_node_spec *spec = sched_cluster_node_spec(d->cluster, i);
    const struct sched_pool *pool = sched_cluster_pool(d->cluster, spec->pool);
    enum sched_node_state st = sched_cluster_node_state(d->cluster, i);

    if (mu_buf_append(b, "{\"name\":", 8, err) != 0
        || mu_buf_append_json_str(b, node->name, err) != 0
        || mu_buf_append(b, ",\"pool\":", 8, err) != 0
        || mu_buf_append_json_str(b, node->pool, err) != 0
        || mu_buf_appendf(b, err,
                          ",\"capacity\":\"%s\",\"state\":\"%s\",\"gpus\":%d,\"gpus_free\":%d,"
                          "\"cpus\":%d,\"memory_mb\":%lld,\"heartbeat_at\":%llu,\"addr\":",
                          pool->capacity == SCHED_SPOT ? "spot" : "on-demand",
                          sched_node_state_name(st), sched_cluster_node_gpus_total(d->cluster, i),
                          sched_cluster_node_gpus_free(d->cluster, i), spec->cpus,
                          (long long)spec->memory_mb, (unsigned long long)heartbeat_ms)
               != 0
        || mu_buf_append_json_str(b, node->addr, err) != 0
        || mu_buf_appendf(b, err, ",\"at_risk\":%s,\"idle_since\":%llu,\"releasable\":%s",
                          node->at_risk ? "true" : "false", (unsigned long long)node->idle_since_ms,
                          releasable ? "true" : "false")
               != 0
        || (node->reason[0]
            && (mu_buf_append(b, ",\"reason\":", 10, err) != 0
                || mu_buf_append_json_str(b, node->reason, err) != 0))
        || (node->instance_id[0]
            && (mu_buf_append(b, ",\"instance_id\":", 15, err) != 0
                || mu_buf_append_json_str(b, node->instance_id, err) != 0))
        || (node->confinement[0]
            && (mu_buf_append(b, ",\"confinement\":", 15, err) != 0
                || mu_buf_append_json_str(b, node->confinement, err) != 0))
        || (node->warning[0]
            && (mu_buf_append(b, ",\"warning\":", 11, err) != 0
                || mu_buf_append_json_str(b, node->warning, err) != 0))
        || slices_json(d, i, NULL, b, err) != 0 || milli_json(d, i, spec, b, err) != 0
        || mu_buf_append(b, ",\"labels\":{", 11, err) != 0)
        return -1;
    for (int l = 0; l < d->cfg.nlevels; l++) {
        if ((l && mu_buf_append(b, ",", 1, err) != 0)
            || mu_buf_append_json_str(b, d->cfg.levels[l], err) != 0
            || mu_buf_append(b, ":", 1, err) != 0
            || mu_buf_append_json_str(b, spec->labels[l], err) != 0)
            return -1;
    }
    return mu_buf_appendf(b, err, "},\"jobs\":[%s]}", jobs->data ? jobs->data : "");
}

void d_status_rewrite(struct musterd *d)
{
    for (int i = 0; i < d->nnodes; i++)
        d->nodes[i].status_sum = 0;
    d->nodes_dirty = true;
}

void d_status_free(struct musterd *d)
{
    for (int i = 0; d->status.jobs && i < d->status.cap; i++)
        mu_buf_release(&d->status.jobs[i]);
    free(d->status.jobs);
    free(d->status.sums);
    free(d->status.changed);
    free(d->status.at);
    free(d->status.kv);
    mu_buf_release(&d->status.text);
    memset(&d->status, 0, sizeof(d->status));
}

/* Grows the write's scratch to n nodes (the texts keep their room between writes); 0 or -1. */
static int status_scratch(struct musterd *d, int n)
{
    if (n > d->status.cap) {
        int cap = n + n / 2;
        struct mu_buf *jobs = realloc(d->status.jobs, (size_t)cap * sizeof(*jobs));
        uint64_t *sums = jobs ? realloc(d->status.sums, (size_t)cap * sizeof(*sums)) : NULL;
        int *changed = sums ? realloc(d->status.changed, (size_t)cap * sizeof(*changed)) : NULL;
        size_t *at = changed ? realloc(d->status.at, (size_t)cap * sizeof(*at)) : NULL;
        struct queue_kv *kv = at ? realloc(d->status.kv, (size_t)cap * sizeof(*kv)) : NULL;
        if (jobs) {
            for (int i = d->status.cap; i < cap; i++)
                mu_buf_init(&jobs[i], 0); /* unused yet: again if a later realloc fails */
            d->status.jobs = jobs;
        }
        if (sums)
            d->status.sums = sums;
        if (changed)
            d->status.changed = changed;
        if (at)
            d->status.at = at;
        if (!kv)
            return -1;
        d->status.kv = kv;
        d->status.cap = cap; /* every array holds cap now */
    }
    for (int i = 0; i < n; i++) {
        d->status.jobs[i].len = 0;
        if (d->status.jobs[i].data)
            d->status.jobs[i].data[0] = '\0';
    }
    if (!d->status.text.max) /* zeroed: never used */
        mu_buf_init(&d->status.text, 0);
    d->status.text.len = 0;
    return 0;
}

static void nodes_write(struct musterd *d)
{
    uint64_t now_ms = mu_time_wall_ms();
    uint64_t hb_refresh_ms = (uint64_t)d->cfg.node_lost_after_s * 1000u / 3u;
    struct mu_buf *jobs;
    struct mu_buf *text = &d->status.text;
    int nchanged = 0;
    struct mu_err err;

    d->nodes_dirty = false;
    if (d->nnodes == 0)
        return;
    if (status_scratch(d, d->nnodes) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "status", 10, "out of memory writing node status");
        return; /* the next heartbeat's write tries again */
    }
    jobs = d->status.jobs;
    if (jobs_by_node(d, jobs, &err) != 0)
        return;
    for (int i = 0; i < d->nnodes; i++) {
        struct d_node *node = &d->nodes[i];
        uint64_t heartbeat_ms = shown_heartbeat(node, hb_refresh_ms);
        bool releasable;
        uint64_t sum;
        if (node->forgotten)
            continue; /* musterctl node forget removed its entry; none until it registers */
        /* Idle since the first status write that found no task here (writes follow every start
         * and release, so this is within a loop turn of the truth). */
        if (jobs[i].len > 0)
            node->idle_since_ms = 0;
        else if (!node->idle_since_ms)
            node->idle_since_ms = now_ms;
        releasable = d_node_releasable(d, node, now_ms);
        sum = node_sum(d, i, &jobs[i], heartbeat_ms, releasable);
        if (sum == node->status_sum)
            continue;
        d->status.at[nchanged] = text->len;
        if (node_json(d, i, &jobs[i], heartbeat_ms, releasable, text, &err) != 0
            || mu_buf_append(text, "", 1, &err) != 0) /* its end, within text */
            return;
        d->status.sums[nchanged] = sum;
        d->status.changed[nchanged++] = i;
    }
    if (nchanged == 0)
        return;
    for (int k = 0; k < nchanged; k++) {
        d->status.kv[k].key = d->nodes[d->status.changed[k]].name;
        d->status.kv[k].value = text->data + d->status.at[k];
    }
    if (d->store.ops->status_write(d->store.ctx, QUEUE_K_NODES, d->status.kv, nchanged, &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-nodes", 5, "cannot write node status: %s",
                       err.msg);
        d->redis_down = true;
        d->nodes_dirty = true;
        return;
    }
    for (int k = 0; k < nchanged; k++) {
        struct d_node *node = &d->nodes[d->status.changed[k]];
        node->status_sum = d->status.sums[k];
        node->status_hb_ms = shown_heartbeat(node, hb_refresh_ms);
    }
}

/* muster:pools: per pool, what it is and how much of it is free (musterctl pools, autoscalers). */
static void pools_write(struct musterd *d)
{
    struct queue_kv kv[CFG_MAX_POOLS] = { { NULL, NULL } };
    struct mu_buf bufs[CFG_MAX_POOLS];
    struct mu_err err;
    int n = d->cfg.npools;

    for (int p = 0; p < n; p++)
        mu_buf_init(&bufs[p], 0);
    for (int p = 0; p < n; p++) {
        const struct cfg_pool *pool = &d->cfg.pools[p];
        int nodes = 0;
        int gpus = 0;
        int gpus_free = 0;
        for (int i = 0; i < d->nnodes; i++) {
            if (!d->nodes[i].online || strcmp(d->nodes[i].pool, pool->name) != 0)
                continue;
            nodes++;
            gpus += sched_cluster_node_gpus_total(d->cluster, i);
            gpus_free += sched_cluster_node_gpus_free(d->cluster, i);
        }
        if (mu_buf_append(&bufs[p], "{\"name\":", 8, &err) != 0
            || mu_buf_append_json_str(&bufs[p], pool->name, &err) != 0
            || mu_buf_append(&bufs[p], ",\"instance_type\":", 17, &err) != 0
            || mu_buf_append_json_str(&bufs[p], pool->instance_type, &err) != 0
            || mu_buf_append(&bufs[p], ",\"gpu_type\":", 12, &err) != 0
            || mu_buf_append_json_str(&bufs[p], pool->gpu_type, &err) != 0
            || mu_buf_appendf(&bufs[p], &err,
                              ",\"capacity\":\"%s\",\"gpus_per_node\":%d,\"price_per_hour\":%g,"
                              "\"max_gpus\":%d,\"nodes\":%d,\"gpus\":%d,\"gpus_free\":%d,"
                              "\"gpus_used\":%d,\"cooldown_until\":%lld",
                              cfg_capacity_name(pool->capacity), pool->gpus_per_node,
                              pool->price_per_hour, pool->max_gpus, nodes, gpus, gpus_free,
                              sched_cluster_pool_gpus_used(d->cluster, p),
                              (long long)sched_cluster_pool_cooldown_until(d->cluster, p) * 1000)
                   != 0
            || slices_json(d, -1, pool->name, &bufs[p], &err) != 0
            || (pool->shared && mu_buf_append(&bufs[p], ",\"shared\":true", 14, &err) != 0)
            || mu_buf_append(&bufs[p], "}", 1, &err) != 0)
            goto out;
        kv[p].key = pool->name;
        kv[p].value = bufs[p].data;
    }
    if (d->store.ops->status_write(d->store.ctx, QUEUE_K_POOLS, kv, n, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-nodes", 5, "cannot write pool status: %s",
                       err.msg);
        d->redis_down = true;
    }
out:
    for (int p = 0; p < n; p++)
        mu_buf_release(&bufs[p]);
}

/* A queue's quota part of its status (closing the object): GPUs used by capacity type and
 * borrowed always; the quota, cohort and limits when it has a quota (null: not limited). */
static int quota_json(const struct cfg_queue *cq,
                      const struct d_queue_stats *st,
                      struct mu_buf *b,
                      struct mu_err *err)
{
    if (mu_buf_appendf(b, err,
                       ",\"used_gpus\":{\"spot\":%lld,\"on-demand\":%lld},\"borrowed_gpus\":%lld,"
                       "\"lent_gpus\":%lld",
                       (long long)st->used_gpus[SCHED_SPOT],
                       (long long)st->used_gpus[SCHED_ON_DEMAND], (long long)st->borrowed_gpus,
                       (long long)st->lent_gpus)
        != 0)
        return -1;
    if (!cq->has_quota) {
        static const char none[] = ",\"quota\":null,\"cohort\":null}";
        return mu_buf_append(b, none, sizeof(none) - 1, err);
    }
    if (mu_buf_appendf(b, err,
                       ",\"quota\":{\"spot\":%d,\"on-demand\":%d},\"borrow_limit\":%d,"
                       "\"lend_limit\":%d,\"cohort\":",
                       cq->quota[CFG_CAPACITY_SPOT], cq->quota[CFG_CAPACITY_ON_DEMAND],
                       cq->borrow_limit, cq->lend_limit)
        != 0)
        return -1;
    if (!cq->cohort[0])
        return mu_buf_append(b, "null}", 5, err);
    if (mu_buf_append_json_str(b, cq->cohort, err) != 0)
        return -1;
    return mu_buf_append(b, "}", 1, err);
}

/* A queue's users with their decayed usage and the GPUs their gangs hold now:
 * ,"users":{"alice":{"usage_gpu_s":…,"running_gpus":…},…}.  A user with neither (less than one
 * GPU-second left) is left out, so it is forgotten at the next restart. */
static int users_json(const struct musterd *d,
                      const struct cfg_queue *cq,
                      struct mu_buf *b,
                      struct mu_err *err)
{
    bool first = true;

    if (mu_buf_append(b, ",\"users\":{", 10, err) != 0)
        return -1;
    for (int i = 0; i < d->usage.nusers; i++) {
        const struct d_user *u = d->usage.users[i];
        if ((u->gpu_s < 1 && u->held_gpus == 0) || strcmp(u->queue, cq->name) != 0)
            continue;
        if ((!first && mu_buf_append(b, ",", 1, err) != 0)
            || mu_buf_append_json_str(b, u->name, err) != 0
            || mu_buf_appendf(b, err, ":{\"usage_gpu_s\":%.3f,\"running_gpus\":%lld}", u->gpu_s,
                              (long long)u->held_gpus)
                   != 0)
            return -1;
        first = false;
    }
    return mu_buf_append(b, "}", 1, err);
}

/* muster:queues: per queue, pending and running jobs and GPUs, the oldest wait, its decayed
 * usage (the one stored copy of it: d_usage_recover reads it back after a restart), and its
 * quota and what it uses of it. */
static void queues_write(struct musterd *d)
{
    uint64_t now_ms = mu_time_wall_ms();
    struct d_queue_stats stats[SCHED_MAX_QUEUES];
    struct queue_kv kv[CFG_MAX_QUEUES] = { { NULL, NULL } };
    struct mu_buf bufs[CFG_MAX_QUEUES];
    struct mu_err err;
    int n = d->cfg.nqueues;

    queue_stats(d, stats, NULL);
    d_usage_accrue(d, now_ms);
    for (int i = 0; i < n; i++)
        mu_buf_init(&bufs[i], 0);
    for (int i = 0; i < n; i++) {
        const struct cfg_queue *cq = &d->cfg.queues[i];
        if (mu_buf_append(&bufs[i], "{\"name\":", 8, &err) != 0
            || mu_buf_append_json_str(&bufs[i], cq->name, &err) != 0
            || mu_buf_appendf(&bufs[i], &err,
                              ",\"weight\":%d,\"pending_jobs\":%d,\"running_jobs\":%d,"
                              "\"pending_gpus\":%lld,\"running_gpus\":%lld,"
                              "\"oldest_pending_at\":%llu,\"usage_gpu_s\":%.3f,"
                              "\"usage_at\":%llu,\"share\":%.6f",
                              cq->weight, stats[i].pending_jobs, stats[i].running_jobs,
                              (long long)stats[i].pending_gpus, (long long)stats[i].running_gpus,
                              (unsigned long long)stats[i].oldest_pending_ms, d->usage.gpu_s[i],
                              (unsigned long long)now_ms, d_usage_share(d, i))
                   != 0
            || users_json(d, cq, &bufs[i], &err) != 0
            || quota_json(cq, &stats[i], &bufs[i], &err) != 0)
            goto out;
        kv[i].key = cq->name;
        kv[i].value = bufs[i].data;
    }
    if (d->store.ops->status_write(d->store.ctx, QUEUE_K_QUEUES, kv, n, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-nodes", 5, "cannot write queue status: %s",
                       err.msg);
        d->redis_down = true;
    }
out:
    for (int i = 0; i < n; i++)
        mu_buf_release(&bufs[i]);
}

void d_status_write(struct musterd *d)
{
    nodes_write(d);
    pools_write(d);
    queues_write(d);
}

void d_jobs_gauges(struct musterd *d, struct d_gauges *g)
{
    memset(g, 0, sizeof(*g));
    queue_stats(d, g->queues, g);
    for (int i = 0; i < d->nnodes; i++) {
        const struct cfg_pool *pool = cfg_pool_find(&d->cfg, d->nodes[i].pool);
        int p;
        int free_gpus;
        if (!pool || !d->nodes[i].online)
            continue;
        p = (int)(pool - d->cfg.pools);
        free_gpus = sched_cluster_node_gpus_free(d->cluster, i);
        g->nodes[p] += 1;
        g->gpus_free[p] += free_gpus;
        g->gpus_used[p] += sched_cluster_node_gpus_total(d->cluster, i) - free_gpus;
        for (int id = 1; id <= sched_cluster_profile_count(d->cluster); id++) {
            int f;
            int t;
            sched_cluster_node_slices(d->cluster, i, id, &f, &t);
            g->slices_free[p][id] += f;
            g->slices_used[p][id] += t - f;
        }
    }
}
